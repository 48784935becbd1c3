//! `gpudash-bench alerts`: what the alert rules cost per tick, and how long an alert takes from the
//! sample that triggers it to a webhook receiver.
//!
//! 1. Rule evaluation: `Alerts::evaluate` over simulated readings of N GPUs (with their processes
//!    and health), CPU time per tick, on quiet ticks and on ticks where every GPU fires or resolves.
//! 2. Delivery: a server on N simulated GPUs whose GPUs fall off the bus and come back again and
//!    again (`lost:I@S+L` faults), a generic webhook to a receiver on loopback; for each
//!    device_lost alert, the time from the first sample that showed the GPU lost (read off the
//!    hub's ticks) to the receiver's receipt of the "firing" delivery, and the same for "resolved".

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpudash::alerts::{Alerts, AlertsConfig};
use gpudash::store::alerts::AlertStore;
use gpudash::telemetry::simulator::{Fault, Simulator};
use gpudash::telemetry::{GpuSource, now_ms};
use shared::alerts::Alert;

use crate::{percentile, thread_cpu_ns};

#[allow(clippy::print_stdout)]
pub fn main(gpus: u32, ticks: u32, windows: u32) -> Result<(), String> {
    evaluation(gpus, ticks)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(delivery(gpus, windows))
}

/// CPU time of one evaluation of every rule over `gpus` GPUs.
#[allow(clippy::print_stdout)]
fn evaluation(gpus: u32, ticks: u32) -> Result<(), String> {
    let source = Simulator::new(gpus, 1000).with_idle_holder();
    let devices = source.devices();
    let alerts =
        Alerts::open(AlertStore::memory().map_err(|e| e.to_string())?, AlertsConfig::default(), Duration::ZERO)
            .map_err(|e| e.to_string())?;
    let readings: Vec<_> = (0..ticks).map(|i| source.sample(u64::from(i) * 1000)).collect();
    // Read after the samples, when the simulator's jobs have started.
    let details = source.details(u64::from(ticks) * 1000);
    let evaluate = |samples: &[shared::DeviceSample], now: u64| {
        let input = gpudash::alerts::Inputs {
            devices: &devices,
            samples,
            health: &details.health,
            processes: &details.processes,
            details_seen: true,
            simulated: true,
            reservations: &[],
            ooms: &[],
        };
        let cpu = thread_cpu_ns();
        let changes = alerts.evaluate(&input, now);
        (thread_cpu_ns().saturating_sub(cpu), changes.len())
    };
    let start = now_ms();
    let mut quiet = Vec::new();
    for (i, samples) in readings.iter().enumerate() {
        quiet.push(Duration::from_nanos(evaluate(samples, start + i as u64 * 1000).0));
    }
    // Every GPU falls off the bus and comes back, tick after tick: each tick fires or resolves `gpus` alerts.
    let lost: Vec<_> = readings[0]
        .iter()
        .map(|s| shared::DeviceSample {
            index: s.index,
            timestamp_ms: s.timestamp_ms,
            lost: Some("GPU is lost (benchmark)".into()),
            ..shared::DeviceSample::default()
        })
        .collect();
    let mut busy = Vec::new();
    let mut changed = 0;
    for i in 0..ticks.min(400) {
        let samples = if i % 2 == 0 { &lost } else { &readings[0] };
        let (ns, n) = evaluate(samples, start + u64::from(ticks + i) * 1000);
        busy.push(Duration::from_nanos(ns));
        changed += n;
    }
    alerts.sync().map_err(|e| e.to_string())?;
    quiet.sort();
    busy.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("rule evaluation ({gpus} simulated GPUs, {} processes, every rule on)", details.processes.len());
    println!(
        "  quiet tick:        median {:.1} µs, p99 {:.1} µs CPU ({ticks} ticks; {:.2} µs per GPU)",
        us(percentile(&quiet, 0.5)),
        us(percentile(&quiet, 0.99)),
        us(percentile(&quiet, 0.5)) / f64::from(gpus)
    );
    println!(
        "  every GPU changes: median {:.1} µs, p99 {:.1} µs CPU ({} ticks, {changed} fires and resolves, stored)",
        us(percentile(&busy, 0.5)),
        us(percentile(&busy, 0.99)),
        busy.len()
    );
    println!("  at 1 s sampling the quiet figure is {:.4}% of one core", us(percentile(&quiet, 0.5)) / 1e4);
    Ok(())
}

/// One request the receiver got: when, and the alert and its state.
type Received = Arc<Mutex<Vec<(u64, String, Alert)>>>;

async fn receiver() -> Result<(url::Url, Received), String> {
    let got: Received = Arc::default();
    let kept = got.clone();
    let app = axum::Router::new().fallback(move |body: String| {
        let got = kept.clone();
        async move {
            let at = now_ms();
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(&body)
                && let Ok(alert) = serde_json::from_value::<Alert>(value["alert"].clone())
            {
                let state = value["state"].as_str().unwrap_or_default().to_owned();
                got.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((at, state, alert));
            }
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    let url = url::Url::parse(&format!("http://{addr}/hook")).map_err(|e| e.to_string())?;
    Ok((url, got))
}

/// Sample → webhook receipt for `windows` lost-and-back windows spread over `gpus` GPUs.
#[allow(clippy::print_stdout)]
async fn delivery(gpus: u32, windows: u32) -> Result<(), String> {
    const PERIOD_MS: u64 = 1200;
    const LENGTH_MS: u64 = 500;
    let (url, got) = receiver().await?;
    let rounds = windows.div_ceil(gpus);
    let sim = (0..windows).try_fold(Simulator::new(gpus, 100), |sim, k| {
        let start = 1000 + u64::from(k / gpus) * PERIOD_MS;
        let fault: Fault = format!("lost:{}@{start}ms+{LENGTH_MS}ms", k % gpus).parse().map_err(|e| format!("{e}"))?;
        Ok::<_, String>(sim.with_fault(fault))
    })?;
    let options = gpudash::Options {
        alerts: AlertsConfig { webhooks: vec![gpudash::alerts::Webhook::generic(url)], ..AlertsConfig::default() },
        ..gpudash::Options::new(Duration::from_millis(100))
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let running = gpudash::start_with(listener, Box::new(sim), options).await.map_err(|e| e.to_string())?;
    // The first sample of each lost spell and of each return, per GPU, off the hub's own ticks.
    let mut frames = running.telemetry().subscribe();
    let mut changes: Vec<Vec<(u64, bool)>> = vec![Vec::new(); gpus as usize];
    let until = Instant::now() + Duration::from_millis(1000 + u64::from(rounds) * PERIOD_MS + 2000);
    while Instant::now() < until {
        let Ok(Ok(frame)) = tokio::time::timeout(Duration::from_secs(1), frames.recv()).await else { continue };
        let gpudash::telemetry::Update::Tick(tick) = frame else { continue };
        for sample in &tick.samples {
            let lost = sample.lost.is_some();
            let seen = &mut changes[sample.index as usize];
            if seen.last().map_or(lost, |(_, was)| *was != lost) {
                seen.push((sample.timestamp_ms, lost));
            }
        }
    }
    // Deliveries still on their way get a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.shutdown().await.map_err(|e| e.to_string())?;
    let got = got.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let mut fired = Vec::new();
    let mut resolved = Vec::new();
    for (at, state, alert) in got.iter().filter(|(_, _, a)| a.rule == shared::alerts::Rule::DeviceLost) {
        let firing = state == "firing";
        let stamp = if firing { alert.fired_ms } else { alert.resolved_ms.unwrap_or(alert.fired_ms) };
        // The newest sample that showed this change at or before the alert's own time.
        let trigger = changes[alert.gpu_index as usize].iter().rev().find(|(t, lost)| *lost == firing && *t <= stamp);
        if let Some((t, _)) = trigger {
            let latency = Duration::from_millis(at.saturating_sub(*t));
            if firing { fired.push(latency) } else { resolved.push(latency) }
        }
    }
    fired.sort();
    resolved.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "sample → webhook receipt ({gpus} simulated GPUs at 100 ms, {windows} lost-and-back windows, loopback receiver)"
    );
    for (what, list) in [("firing", &fired), ("resolved", &resolved)] {
        if list.is_empty() {
            return Err(format!("no {what} device_lost delivery could be matched to its sample"));
        }
        println!(
            "  {what:<8}: {} deliveries, median {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            list.len(),
            ms(percentile(list, 0.5)),
            ms(percentile(list, 0.99)),
            ms(list[list.len() - 1])
        );
    }
    println!("  (includes the wait for the tick's evaluation, the store write, the queue and the HTTP round trip)");
    Ok(())
}
