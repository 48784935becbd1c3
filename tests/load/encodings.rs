//! `gpudash-load encodings`: what one tick weighs and costs in each candidate
//! wire encoding, on the simulator's readings.
//!
//! Encoding happens once per tick whatever the number of viewers; the bytes
//! are what every viewer's socket then carries, and decoding is every page's work.

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

use gpudash::telemetry::GpuSource as _;
use gpudash::telemetry::simulator::Simulator;
use serde_json::{Map, Value};
use shared::{ServerMessage, Tick};

#[derive(clap::Args, Debug)]
pub struct EncodingArgs {
    /// Simulated GPUs per tick.
    #[arg(long, default_value_t = 8)]
    gpus: u32,
    /// Ticks to encode (each encoding runs over all of them; at most 100000).
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u32).range(2..=100_000))]
    ticks: u32,
    /// Viewers the bandwidth column is computed for.
    #[arg(long, default_value_t = 1000)]
    viewers: u32,
    /// Ticks per second the bandwidth column is computed for.
    #[arg(long, default_value_t = 10)]
    rate: u32,
}

/// One candidate: how to encode a tick (given the one before) and how to read it back.
struct Candidate {
    name: &'static str,
    encode: fn(&Tick, Option<&Tick>) -> Vec<u8>,
    decode: fn(&[u8], Option<&Tick>) -> Tick,
}

const CANDIDATES: [Candidate; 5] = [
    Candidate {
        name: "JSON, full tick (what /ws sends today)",
        encode: |t, _| serde_json::to_vec(&ServerMessage::Tick(t.clone())).expect("serializes"),
        decode: |b, _| match serde_json::from_slice(b).expect("decodes") {
            ServerMessage::Tick(t) => t,
            other => panic!("not a tick: {other:?}"),
        },
    },
    Candidate { name: "JSON, delta (changed fields only)", encode: json_delta, decode: apply_json_delta },
    Candidate {
        name: "MessagePack, full tick, named fields",
        encode: |t, _| rmp_serde::to_vec_named(&ServerMessage::Tick(t.clone())).expect("serializes"),
        decode: |b, _| match rmp_serde::from_slice(b).expect("decodes") {
            ServerMessage::Tick(t) => t,
            other => panic!("not a tick: {other:?}"),
        },
    },
    Candidate {
        name: "MessagePack, full tick, fields by position",
        encode: |t, _| rmp_serde::to_vec(t).expect("serializes"),
        decode: |b, _| rmp_serde::from_slice(b).expect("decodes"),
    },
    Candidate {
        name: "postcard, full tick",
        encode: |t, _| postcard::to_allocvec(t).expect("serializes"),
        decode: |b, _| postcard::from_bytes(b).expect("decodes"),
    },
];

pub fn run(args: &EncodingArgs) -> Result<String, String> {
    let interval_ms = u64::from(1000 / args.rate.max(1));
    let sim = Simulator::new(args.gpus, interval_ms);
    let t0 = gpudash::telemetry::now_ms();
    let ticks: Vec<Tick> =
        (0..u64::from(args.ticks)).map(|i| Tick { seq: i + 1, samples: sim.sample(t0 + i * interval_ms) }).collect();

    let mut out = String::new();
    let _ = writeln!(
        out,
        "gpudash-load encodings: {} ticks of {} simulated GPUs; bandwidth for {} viewers at {} Hz\n",
        args.ticks, args.gpus, args.viewers, args.rate
    );
    let _ = writeln!(
        out,
        "| encoding | bytes per tick (mean) | all viewers | encode per tick | decode per tick (native) |\n| --- | --- | --- | --- | --- |"
    );
    for candidate in &CANDIDATES {
        let mut encoded = Vec::with_capacity(ticks.len());
        let started = Instant::now();
        for (i, tick) in ticks.iter().enumerate() {
            let before = i.checked_sub(1).map(|p| &ticks[p]);
            encoded.push(black_box((candidate.encode)(tick, before)));
        }
        let encode = per_tick(started.elapsed(), ticks.len());
        let started = Instant::now();
        for (i, bytes) in encoded.iter().enumerate() {
            let before = i.checked_sub(1).map(|p| &ticks[p]);
            black_box((candidate.decode)(bytes, before));
        }
        let decode = per_tick(started.elapsed(), ticks.len());
        for (i, bytes) in encoded.iter().enumerate() {
            let before = i.checked_sub(1).map(|p| &ticks[p]);
            if (candidate.decode)(bytes, before) != ticks[i] {
                return Err(format!("{}: tick {} does not read back as sent", candidate.name, i + 1));
            }
        }
        let mean = encoded.iter().map(Vec::len).sum::<usize>() as f64 / encoded.len() as f64;
        let per_second = mean * f64::from(args.viewers) * f64::from(args.rate) / (1024.0 * 1024.0);
        let _ = writeln!(
            out,
            "| {} | {mean:.0} | {per_second:.1} MiB/s | {encode:.1} µs | {decode:.1} µs |",
            candidate.name
        );
    }
    Ok(out)
}

fn per_tick(elapsed: Duration, ticks: usize) -> f64 {
    elapsed.as_secs_f64() * 1e6 / ticks as f64
}

fn fields(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Each sample with `index`, `timestamp_ms` and only the fields that changed since the tick before.
fn json_delta(tick: &Tick, before: Option<&Tick>) -> Vec<u8> {
    let samples: Vec<Value> = tick
        .samples
        .iter()
        .map(|sample| {
            let now = fields(serde_json::to_value(sample).expect("serializes"));
            let Some(old) = before.and_then(|b| b.samples.iter().find(|s| s.index == sample.index)) else {
                return Value::Object(now);
            };
            let old = fields(serde_json::to_value(old).expect("serializes"));
            Value::Object(
                now.into_iter().filter(|(k, v)| k == "index" || k == "timestamp_ms" || old.get(k) != Some(v)).collect(),
            )
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "type": "tick_delta", "seq": tick.seq, "samples": samples }))
        .expect("serializes")
}

fn apply_json_delta(bytes: &[u8], before: Option<&Tick>) -> Tick {
    let delta: Value = serde_json::from_slice(bytes).expect("decodes");
    let seq = delta["seq"].as_u64().expect("seq");
    let samples = delta["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|changed| {
            let changed = fields(changed.clone());
            let index = changed.get("index").and_then(Value::as_u64);
            let old = before.and_then(|b| b.samples.iter().find(|s| Some(u64::from(s.index)) == index));
            let mut whole = old.map(|o| fields(serde_json::to_value(o).expect("serializes"))).unwrap_or_default();
            whole.extend(changed);
            serde_json::from_value(Value::Object(whole)).expect("a sample")
        })
        .collect();
    Tick { seq, samples }
}
