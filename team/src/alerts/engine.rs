//! The engine's thread: woken by every message the telemetry hub broadcasts (ticks and the slow
//! loop's details), it reads the hub's newest state and evaluates the rules, so sampling never
//! waits on a rule, the database or a delivery.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use base::clock::Clock;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use super::{Alerts, Inputs};
use crate::reservations::Reservations;
use telemetry::{Telemetry, now_ms};

/// How often resolved alerts past the retention are deleted (also once at start).
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Starts the engine on its own thread; it ends when `shutdown` turns true or the hub goes away.
pub fn spawn(
    alerts: Alerts,
    telemetry: &Arc<Telemetry>,
    reservations: Reservations,
    clock: &Clock,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    let clock = clock.clone();
    let runtime = tokio::runtime::Handle::current();
    let mut ticks = telemetry.subscribe();
    let telemetry = Arc::downgrade(telemetry);
    std::thread::Builder::new().name("gpudash-alerts".into()).spawn(move || {
        let mut details_seen = false;
        let mut pruned = clock.now();
        loop {
            let woke = runtime.block_on(async {
                tokio::select! {
                    frame = ticks.recv() => Some(frame),
                    _ = shutdown.changed() => None,
                }
            });
            match woke {
                None | Some(Err(RecvError::Closed)) => return,
                Some(Ok(frame)) => details_seen |= frame.seq().is_none(),
                // Behind: the hub's newest state covers what was skipped.
                Some(Err(RecvError::Lagged(_))) => {}
            }
            if *shutdown.borrow() {
                return;
            }
            let Some(telemetry) = telemetry.upgrade() else { return };
            evaluate(&alerts, &telemetry, &reservations, &mut details_seen);
            if clock.now().saturating_duration_since(pruned) >= PRUNE_EVERY {
                pruned = clock.now();
                alerts.prune(clock.now_ms());
            }
        }
    })
}

/// One evaluation over the hub's newest state.
pub fn evaluate(alerts: &Alerts, telemetry: &Telemetry, reservations: &Reservations, details_seen: &mut bool) {
    let now = now_ms();
    let reserved = reservations.active(now);
    let samples = telemetry.latest();
    let details = telemetry.details();
    // Details published before this thread subscribed count too.
    *details_seen |= !details.health.is_empty() || !details.processes.is_empty();
    let now = now_ms();
    let ooms = alerts.ooms(now);
    let input = Inputs {
        devices: telemetry.devices(),
        samples: &samples,
        health: &details.health,
        processes: &details.processes,
        details_seen: *details_seen,
        simulated: telemetry.host().simulated,
        reservations: &reserved,
        ooms: &ooms,
    };
    alerts.evaluate(&input, now);
}
