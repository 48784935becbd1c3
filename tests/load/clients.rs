//! One simulated viewer: a WebSocket that reads every message and notes, for
//! each tick, how long after its sample was taken it arrived.
//!
//! A viewer parses only the few bytes it needs (message type, `seq`, the first
//! `timestamp_ms`), so that 2,000 of them stay cheap next to the server they load.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

/// When a viewer counts what it receives.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub from: Instant,
    pub until: Instant,
}

/// What one viewer saw inside the measuring window.
#[derive(Debug, Default)]
pub struct ClientStats {
    /// Why the viewer never connected or stopped early.
    pub error: Option<String>,
    pub ticks: u32,
    /// Snapshots after the first: the server resynchronised a viewer that fell behind.
    pub resyncs: u32,
    /// Messages other than ticks (details, lab events, snapshots).
    pub other_messages: u32,
    pub tick_bytes: u64,
    /// Size of the snapshot received on connect.
    pub snapshot_bytes: Option<usize>,
    pub all_bytes: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// Arrival time minus the tick's sample timestamp, microseconds.
    pub delays_us: Vec<u32>,
}

/// Connects to `url` and reads until `window.until`, then closes.
pub async fn run(url: String, window: Window, expected_ticks: usize) -> ClientStats {
    let mut stats = ClientStats { delays_us: Vec::with_capacity(expected_ticks), ..ClientStats::default() };
    let connect = tokio::time::timeout(Duration::from_secs(10), tokio_tungstenite::connect_async(url.as_str()));
    let mut socket = match connect.await {
        Ok(Ok((socket, _))) => socket,
        Ok(Err(e)) => return ClientStats { error: Some(format!("connect: {e}")), ..stats },
        Err(_) => return ClientStats { error: Some("connect: no answer in 10 s".into()), ..stats },
    };
    let mut snapshots = 0u32;
    loop {
        let next = match tokio::time::timeout_at(window.until, socket.next()).await {
            Err(_) => break,
            Ok(None) => {
                stats.error = Some("the server closed the socket".into());
                break;
            }
            Ok(Some(Err(e))) => {
                stats.error = Some(format!("read: {e}"));
                break;
            }
            Ok(Some(Ok(message))) => message,
        };
        let arrived_us = now_us();
        let Message::Text(text) = next else { continue };
        let kind = message_type(&text);
        if kind == Some("snapshot") {
            snapshots += 1;
            stats.snapshot_bytes.get_or_insert(text.len());
        }
        if Instant::now() < window.from {
            continue;
        }
        stats.all_bytes += text.len() as u64;
        if kind != Some("tick") {
            stats.other_messages += 1;
            if kind == Some("snapshot") && snapshots > 1 {
                stats.resyncs += 1;
            }
            continue;
        }
        stats.ticks += 1;
        stats.tick_bytes += text.len() as u64;
        if let Some(seq) = number_after(&text, "\"seq\":") {
            stats.first_seq.get_or_insert(seq);
            stats.last_seq = Some(seq);
        }
        if let Some(sampled_ms) = number_after(&text, "\"timestamp_ms\":") {
            let delay = arrived_us.saturating_sub(sampled_ms.saturating_mul(1000));
            stats.delays_us.push(u32::try_from(delay).unwrap_or(u32::MAX));
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), socket.close(None)).await;
    stats
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The `type` of a server message, which the server writes first.
fn message_type(text: &str) -> Option<&str> {
    let rest = text.strip_prefix("{\"type\":\"")?;
    rest.get(..rest.find('"')?)
}

/// The unsigned integer right after the first `key` in `text`.
fn number_after(text: &str, key: &str) -> Option<u64> {
    let start = text.find(key)? + key.len();
    let digits = &text[start..];
    let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
    digits[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::{DeviceSample, ServerMessage, Tick};

    #[test]
    fn reads_type_seq_and_timestamp_of_a_real_tick() {
        let tick = ServerMessage::Tick(Tick {
            seq: 42,
            samples: vec![DeviceSample { index: 0, timestamp_ms: 1_764_000_000_123, ..Default::default() }],
        });
        let text = serde_json::to_string(&tick).unwrap();
        assert_eq!(message_type(&text), Some("tick"));
        assert_eq!(number_after(&text, "\"seq\":"), Some(42));
        assert_eq!(number_after(&text, "\"timestamp_ms\":"), Some(1_764_000_000_123));
        assert_eq!(message_type("[1]"), None);
        assert_eq!(number_after("{\"seq\":null}", "\"seq\":"), None);
    }
}
