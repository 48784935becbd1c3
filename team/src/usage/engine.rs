//! The accounting thread: woken by the slow loop's details (process lists and energy), it
//! charges each GPU's interval since its previous reading and flushes per-minute sums to the
//! usage store every [`FLUSH_EVERY`] and when it stops, so sampling never waits on SQLite.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use base::clock::Clock;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use super::account::{Accountant, Reading, Totals};
use store::usage::{Bucket, Sums, UsageStore};
use telemetry::Telemetry;

/// How often charged sums are written: a crash loses at most this much accounting.
pub const FLUSH_EVERY: Duration = Duration::from_secs(2);
/// How often minutes past the retention are rolled into hours (also once at start).
const ROLL_UP_EVERY: Duration = Duration::from_secs(3600);

/// Sums charged since the last flush, per (user, workload key, GPU, minute start).
type Pending = HashMap<(String, String, u32, u64), Totals>;

/// Starts the accounting thread; it flushes and ends when `shutdown` turns true or the hub goes away.
pub fn spawn(
    store: UsageStore,
    telemetry: &Arc<Telemetry>,
    period: Duration,
    minute_retention: Duration,
    clock: &Clock,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    let clock = clock.clone();
    let runtime = tokio::runtime::Handle::current();
    let mut frames = telemetry.subscribe();
    let telemetry = Arc::downgrade(telemetry);
    let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
    let retention_ms = u64::try_from(minute_retention.as_millis()).unwrap_or(u64::MAX);
    std::thread::Builder::new().name("gpudash-usage".into()).spawn(move || {
        let mut accountant = Accountant::new(period_ms);
        let mut pending = Pending::new();
        let (mut flushed, mut rolled) = (clock.now(), None::<Instant>);
        loop {
            if rolled.is_none_or(|at| clock.now().saturating_duration_since(at) >= ROLL_UP_EVERY) {
                rolled = Some(clock.now());
                let now = clock.now_ms();
                if let Err(e) = store.roll_up(now.saturating_sub(retention_ms), now) {
                    tracing::warn!("could not roll up usage: {e}");
                }
            }
            let woke = runtime.block_on(async {
                tokio::select! {
                    frame = tokio::time::timeout(FLUSH_EVERY, frames.recv()) => Some(frame),
                    _ = shutdown.changed() => None,
                }
            });
            let stop = match woke {
                None | Some(Ok(Err(RecvError::Closed))) => true,
                // Ticks (with a sequence number) carry no processes; details do.
                Some(Ok(Ok(frame))) if frame.seq().is_some() => false,
                // Details, a timeout, or behind: the hub's newest details cover what was skipped
                // (a skipped reading makes one interval longer, which the gap cap bounds).
                Some(_) => {
                    match telemetry.upgrade() {
                        Some(telemetry) => charge(&mut accountant, &telemetry, &mut pending),
                        None => break,
                    }
                    false
                }
            };
            if stop || *shutdown.borrow() {
                break;
            }
            if clock.now().saturating_duration_since(flushed) >= FLUSH_EVERY {
                flushed = clock.now();
                flush(&store, &mut pending);
            }
        }
        flush(&store, &mut pending);
    })
}

/// Charges the hub's newest details (each GPU's processes, read at its health reading's time).
fn charge(accountant: &mut Accountant, telemetry: &Telemetry, pending: &mut Pending) {
    let details = telemetry.details();
    let latest = telemetry.latest();
    for health in &details.health {
        let reading = Reading {
            device: health.index,
            at_ms: health.timestamp_ms,
            energy_mj: health.energy_mj,
            gpu_util: latest.iter().find(|s| s.index == health.index).and_then(|s| s.gpu_util),
            processes: details.processes.iter().filter(|p| p.device == health.index).collect(),
        };
        for charge in accountant.charge(&reading) {
            let minute = charge.at_ms - charge.at_ms % 60_000;
            pending.entry((charge.user, charge.workload, charge.device, minute)).or_default().add(&charge.totals);
        }
    }
}

fn flush(store: &UsageStore, pending: &mut Pending) {
    let buckets = pending
        .drain()
        .map(|((user, workload, device, start), t)| Bucket {
            user,
            device,
            workload,
            start,
            sums: Sums { gpu_s: t.gpu_s, memory_gib_s: t.memory_gib_s, idle_gib_s: t.idle_gib_s, energy_j: t.energy_j },
        })
        .collect();
    store.add(buckets);
}
