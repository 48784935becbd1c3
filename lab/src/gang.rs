//! Runs that occupy several GPUs (p2p): the run is queued on its own GPU's
//! worker and a *hold* on every other GPU's worker, all under one lock, so
//! every worker sees multi-GPU runs in the same order and none can wait on
//! another in a cycle. A held worker parks at the hold until the run ends;
//! the run starts once every other worker has parked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How often a waiting worker looks at the cancel flag.
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
struct GateState {
    /// Held workers parked at the hold.
    parked: usize,
    /// The run started: parked workers stay until it ends, even when cancelled.
    started: bool,
    ended: bool,
}

/// Where a multi-GPU run and the workers it holds meet.
#[derive(Debug)]
pub struct Gate {
    /// Workers that must park before the run starts.
    holds: usize,
    state: Mutex<GateState>,
    changed: Condvar,
}

impl Gate {
    /// A gate for a run holding `holds` other workers.
    pub fn new(holds: usize) -> Self {
        Self { holds, state: Mutex::default(), changed: Condvar::new() }
    }

    fn state(&self) -> MutexGuard<'_, GateState> {
        base::sync::lock(&self.state)
    }

    /// A held worker: parks until the run ends. Leaves early only if the run is cancelled before it started.
    pub fn park(&self, cancel: &AtomicBool) {
        let mut state = self.state();
        state.parked += 1;
        self.changed.notify_all();
        loop {
            if state.ended || (!state.started && cancel.load(Ordering::Relaxed)) {
                state.parked -= 1;
                self.changed.notify_all();
                return;
            }
            state = base::sync::wait_timeout(&self.changed, state, POLL);
        }
    }

    /// The run's worker: waits until every held worker parked, then marks the run started.
    /// False when the run was cancelled first.
    pub fn start(&self, cancel: &AtomicBool) -> bool {
        let mut state = self.state();
        loop {
            if cancel.load(Ordering::Relaxed) {
                return false;
            }
            if state.parked >= self.holds {
                state.started = true;
                return true;
            }
            state = base::sync::wait_timeout(&self.changed, state, POLL);
        }
    }

    /// The run ended (or will never start): releases the parked workers.
    pub fn end(&self) {
        self.state().ended = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use base::clock::Stopwatch;
    use std::sync::Arc;

    #[test]
    fn the_run_starts_once_every_held_worker_parked_and_frees_them_at_the_end() {
        let gate = Arc::new(Gate::new(2));
        let cancel = Arc::new(AtomicBool::new(false));
        let parked: Vec<_> = (0..2)
            .map(|_| {
                let (gate, cancel) = (gate.clone(), cancel.clone());
                std::thread::spawn(move || {
                    gate.park(&cancel);
                    Stopwatch::now()
                })
            })
            .collect();
        assert!(gate.start(&cancel));
        std::thread::sleep(Duration::from_millis(60));
        let ended = Stopwatch::now();
        // Cancelling a started run does not free the held GPUs before it ends.
        cancel.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(60));
        gate.end();
        for p in parked {
            assert!(p.join().unwrap() >= ended);
        }
    }

    #[test]
    fn a_run_cancelled_while_waiting_frees_the_parked_workers() {
        let gate = Arc::new(Gate::new(2));
        let cancel = Arc::new(AtomicBool::new(false));
        let one = {
            let (gate, cancel) = (gate.clone(), cancel.clone());
            std::thread::spawn(move || gate.park(&cancel))
        };
        cancel.store(true, Ordering::Relaxed);
        assert!(!gate.start(&cancel), "one of two holds parked, then cancelled");
        one.join().unwrap();
    }
}
