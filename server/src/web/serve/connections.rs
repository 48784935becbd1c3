//! Every open connection and what it is doing (waiting for a request, serving one, or a
//! WebSocket), so that at the limit the one idle longest can be told to close.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// At most one warning about the limit this often, however many connections hit it.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// What an open connection is doing, for choosing which one to close at the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a request head since then (or in its TLS handshake).
    Idle(Instant),
    /// Serving this many requests (their responses not yet fully sent).
    Busy(u32),
    /// A WebSocket: never closed to make room.
    Upgraded,
    /// Chosen to make room; its task is closing it.
    Closing,
}

/// Every open connection and what it is doing.
#[derive(Debug)]
pub(super) struct Registry {
    max: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    open: HashMap<u64, (State, Arc<Notify>)>,
    /// Closed or refused at the limit since the last warning.
    closed: u64,
    refused: u64,
    last_warning: Option<Instant>,
}

impl Registry {
    pub(super) fn new(max: usize) -> Self {
        Self { max, inner: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a new connection; at the limit, the connection idle longest is told to close
    /// first, and with none idle the new one is refused (`None`: dropping the socket closes it).
    pub(super) fn admit(self: &Arc<Self>) -> Option<Slot> {
        let mut inner = self.lock();
        if inner.open.len() >= self.max {
            let idle_longest = inner
                .open
                .iter()
                .filter_map(|(id, (state, _))| match state {
                    State::Idle(since) => Some((*since, *id)),
                    _ => None,
                })
                .min();
            let admitted = match idle_longest.and_then(|(_, id)| inner.open.get_mut(&id)) {
                Some((state, close)) => {
                    *state = State::Closing;
                    close.notify_one();
                    inner.closed += 1;
                    true
                }
                None => {
                    inner.refused += 1;
                    false
                }
            };
            self.warn_at_limit(&mut inner);
            if !admitted {
                return None;
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let close = Arc::new(Notify::new());
        inner.open.insert(id, (State::Idle(Instant::now()), close.clone()));
        Some(Slot { id, close, registry: self.clone() })
    }

    /// One line per [`WARN_EVERY`], however many connections hit the limit.
    fn warn_at_limit(&self, inner: &mut Inner) {
        if inner.last_warning.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            return;
        }
        tracing::warn!(
            "connection limit reached: {} open (--max-connections {}); closed {} idle connection(s) and refused {} \
             since the last warning. If these are real clients, raise --max-connections (GPUDASH_MAX_CONNECTIONS)",
            inner.open.len(),
            self.max,
            inner.closed,
            inner.refused,
        );
        inner.closed = 0;
        inner.refused = 0;
        inner.last_warning = Some(Instant::now());
    }

    fn set(&self, id: u64, state: State) {
        if let Some((current, _)) = self.lock().open.get_mut(&id) {
            *current = state;
        }
    }

    /// Applies `change` to a connection's state, unless it is closing or a WebSocket.
    fn update(&self, id: u64, change: impl FnOnce(State) -> State) {
        if let Some((current, _)) = self.lock().open.get_mut(&id)
            && !matches!(current, State::Upgraded | State::Closing)
        {
            *current = change(*current);
        }
    }

    #[cfg(test)]
    fn state(&self, id: u64) -> Option<State> {
        self.lock().open.get(&id).map(|(state, _)| *state)
    }
}

/// A connection's place in the [`Registry`], given back when its socket closes.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) id: u64,
    /// Notified when the registry closes this connection to make room.
    pub(super) close: Arc<Notify>,
    registry: Arc<Registry>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.lock().open.remove(&self.id);
    }
}

/// A request being served: the connection is busy until the response body is sent (or dropped).
#[derive(Debug)]
pub(super) struct Busy {
    registry: Arc<Registry>,
    id: u64,
}

impl Busy {
    pub(super) fn start(registry: Arc<Registry>, id: u64) -> Self {
        registry.update(id, |state| match state {
            State::Busy(n) => State::Busy(n + 1),
            _ => State::Busy(1),
        });
        Self { registry, id }
    }

    /// The response switched protocols: the connection is a WebSocket from now on.
    pub(super) fn upgraded(&self) {
        self.registry.set(self.id, State::Upgraded);
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.registry.update(self.id, |state| match state {
            State::Busy(n) if n > 1 => State::Busy(n - 1),
            _ => State::Idle(Instant::now()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_limit_the_connection_idle_longest_closes_and_websockets_stay() {
        let registry = Arc::new(Registry::new(3));
        let websocket = registry.admit().unwrap();
        registry.set(websocket.id, State::Upgraded);
        let oldest = registry.admit().unwrap();
        let busy = registry.admit().unwrap();
        let request = Busy::start(registry.clone(), busy.id);

        let newcomer = registry.admit().expect("room made by closing an idle connection");
        assert_eq!(registry.state(oldest.id), Some(State::Closing));
        assert_eq!(registry.state(websocket.id), Some(State::Upgraded));
        assert_eq!(registry.state(busy.id), Some(State::Busy(1)));
        drop(oldest);

        // The newcomer is idle now: it goes next, then nothing is left to close.
        let another = registry.admit().unwrap();
        assert_eq!(registry.state(newcomer.id), Some(State::Closing));
        drop(newcomer);
        let second_request = Busy::start(registry.clone(), another.id);
        assert!(registry.admit().is_none(), "a WebSocket and two busy connections: refused");

        // A request that has been answered leaves its connection idle, so closable again.
        drop(request);
        assert!(matches!(registry.state(busy.id), Some(State::Idle(_))));
        assert!(registry.admit().is_some());
        assert_eq!(registry.state(busy.id), Some(State::Closing));
        assert_eq!(registry.state(another.id), Some(State::Busy(1)));
        drop(second_request);
    }
}
