//! Every open connection, whose it is and what it is doing (waiting for a request, reading a
//! request's body, serving one, or a WebSocket), so that at a limit the right one can be told
//! to close. The rules, in the order they apply:
//!
//! 1. One client address (an IPv6 /64) holds at most `per_client` connections; past it the
//!    client's own connection idle longest closes, else the newcomer is refused. Trusted proxies
//!    are exempt: they carry everyone. On the machine itself (127.0.0.1, ::1) each local user is
//!    a client of their own, by the uid owning the socket, so one user's flood never spends an
//!    admin's share.
//! 2. Past `max - reserve` open connections only 127.0.0.1 and ::1 are admitted: the last
//!    `reserve` slots are kept so an admin on the machine can always get in, and no outside
//!    newcomer closes a connection from them to make room. (The rest of
//!    127.0.0.0/8 counts as any other client, which is how the flood tests stand in for remote
//!    attackers.)
//! 3. At the limit, to make room, from the client holding the most connections (the newcomer's
//!    own, or one holding more than the newcomer's client does): its connection
//!    idle longest; else the one that has trickled its request body longest (over [`SLOW_BODY`]);
//!    else its oldest anonymous WebSocket. Signed-in WebSockets and requests being answered are
//!    never closed. With none to close, the newcomer is refused.
//! 4. One client holds at most `per_client / 4` anonymous WebSockets; a newer one closes its oldest
//!    (trusted proxies excepted: behind one, every viewer has its address).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base::clock::Clock;

use ipnet::IpNet;
use tokio::sync::Notify;

/// At most one warning about the limits this often, however many connections hit them.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// A request body still arriving after this long may be closed to make room at the limit.
pub(super) const SLOW_BODY: Duration = Duration::from_secs(1);

/// What an open connection is doing, for choosing which one to close at the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a request head since then (or in its TLS handshake).
    Idle(Instant),
    /// Reading a request's body since then.
    Reading(Instant),
    /// Serving this many requests (their responses not yet fully sent).
    Busy(u32),
    /// A WebSocket since then: closed to make room only when anonymous.
    Upgraded { anonymous: bool, since: Instant },
    /// Chosen to make room; its task is closing it.
    Closing,
}

/// The limits the registry keeps.
#[derive(Debug, Clone)]
pub(super) struct Limits {
    /// Open connections in all.
    pub max: usize,
    /// Open connections per client address.
    pub per_client: usize,
    /// Peers exempt from `per_client` (trusted proxies).
    pub exempt: Vec<IpNet>,
}

impl Limits {
    /// Slots only loopback may take: a sixteenth of the limit, 1 to 64.
    fn reserve(&self) -> usize {
        (self.max / 16).clamp(1, 64).min(self.max.saturating_sub(1))
    }

    /// Anonymous WebSockets one client may hold.
    fn anonymous_sockets(&self) -> usize {
        (self.per_client / 4).max(1)
    }
}

/// Whom a connection is counted under: its address, or its /64 for IPv6 (one host usually has
/// a whole /64); and from the machine itself (127.0.0.1, ::1), also the uid owning the client's
/// socket (`None` when it could not be looked up: those share one count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Client {
    ip: IpAddr,
    uid: Option<u32>,
}

impl Client {
    pub(super) fn new(peer: IpAddr, uid: Option<u32>) -> Self {
        let ip = match peer {
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
            IpAddr::V6(v6) if !v6.is_loopback() => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
            _ => peer,
        };
        Self { ip, uid: if is_home(ip) { uid } else { None } }
    }

    /// 127.0.0.1 or ::1: the machine itself, where an admin connects from.
    fn is_home(self) -> bool {
        is_home(self.ip)
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.uid {
            Some(uid) => write!(f, "{} (uid {uid})", self.ip),
            None => write!(f, "{}", self.ip),
        }
    }
}

/// Tells a connection's tasks to close it: the HTTP task, and after an upgrade the
/// WebSocket's, whose socket starts failing (see `Held` in serve.rs).
#[derive(Debug, Default)]
pub(super) struct Closer {
    closing: AtomicBool,
    notify: Notify,
}

impl Closer {
    fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Whether the connection has been told to close.
    pub(super) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Completes once the connection is told to close (at once if it already was).
    pub(super) async fn closed(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_closing() {
            return;
        }
        notified.await;
    }
}

/// 127.0.0.1 or ::1: the machine itself, where an admin connects from.
pub(super) fn is_home(client: IpAddr) -> bool {
    client == IpAddr::V4(Ipv4Addr::LOCALHOST) || client == IpAddr::V6(Ipv6Addr::LOCALHOST)
}

#[derive(Debug)]
struct Open {
    state: State,
    close: Arc<Closer>,
    client: Client,
    /// A trusted proxy: it carries everyone, so no per-client rule applies to it.
    exempt: bool,
}

/// Every open connection and what it is doing.
#[derive(Debug)]
pub(super) struct Registry {
    limits: Limits,
    clock: Clock,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    open: HashMap<u64, Open>,
    /// Open connections per client.
    per_client: HashMap<Client, usize>,
    /// Closed or refused at a limit since the last warning.
    closed: u64,
    refused: u64,
    last_warning: Option<Instant>,
}

impl Inner {
    /// Marks `id` closing and wakes its task.
    fn close(&mut self, id: u64) {
        if let Some(open) = self.open.get_mut(&id) {
            open.state = State::Closing;
            open.close.close();
            self.closed += 1;
        }
    }

    /// The connection to close to make room, among those `of` accepts: see the module's rule 3.
    /// The client holding the most connections gives one up first, so a flood from a few
    /// addresses closes its own sockets, not a lone admin's fresh connection.
    fn victim(&self, now: Instant, of: impl Fn(&Open) -> bool) -> Option<u64> {
        let rank = |state: State| match state {
            State::Idle(since) => Some((0, since)),
            State::Reading(since) if now.saturating_duration_since(since) >= SLOW_BODY => Some((1, since)),
            State::Upgraded { anonymous: true, since } => Some((2, since)),
            _ => None,
        };
        self.open
            .iter()
            .filter(|(_, o)| of(o))
            .filter_map(|(id, o)| {
                let (category, since) = rank(o.state)?;
                let held = self.per_client.get(&o.client).copied().unwrap_or(0);
                Some((std::cmp::Reverse(held), category, since, *id))
            })
            .min()
            .map(|(.., id)| id)
    }
}

impl Registry {
    pub(super) fn new(limits: Limits, clock: Clock) -> Self {
        Self { limits, clock, inner: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        base::sync::lock(&self.inner)
    }

    /// A slot for a new connection from `peer`, whose socket `uid` owns when known, or `None`
    /// (dropping the socket closes it): see the module's rules 1 to 3.
    pub(super) fn admit(self: &Arc<Self>, peer: IpAddr, uid: Option<u32>) -> Option<Slot> {
        let now = self.clock.now();
        let client = Client::new(peer, uid);
        let mut inner = self.lock();
        let exempt = self.limits.exempt.iter().any(|net| net.contains(&peer) || net.contains(&client.ip));
        if !exempt && inner.per_client.get(&client).copied().unwrap_or(0) >= self.limits.per_client {
            let own = inner.victim(now, |o| o.client == client);
            let admitted = self.make_room(&mut inner, own);
            if !admitted {
                return None;
            }
        }
        let room = if client.is_home() { self.limits.max } else { self.limits.max - self.limits.reserve() };
        let open = inner.open.values().filter(|o| o.state != State::Closing).count();
        if open >= room {
            // Only from itself or a client holding more, so a few busy addresses cannot push out a lone
            // admin; and an outside client never closes a connection from the machine itself.
            let held = |c: &Client| inner.per_client.get(c).copied().unwrap_or(0);
            let mine = held(&client);
            let outside = !client.is_home();
            let victim = inner
                .victim(now, |o| o.client == client || (held(&o.client) > mine && !(outside && o.client.is_home())));
            if !self.make_room(&mut inner, victim) {
                return None;
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let close = Arc::new(Closer::default());
        inner.open.insert(id, Open { state: State::Idle(now), close: close.clone(), client, exempt });
        *inner.per_client.entry(client).or_default() += 1;
        Some(Slot { id, close, registry: self.clone() })
    }

    /// Closes `victim` if there is one, and warns once per [`WARN_EVERY`]; false means refuse.
    fn make_room(&self, inner: &mut Inner, victim: Option<u64>) -> bool {
        match victim {
            Some(id) => inner.close(id),
            None => inner.refused += 1,
        }
        self.warn_at_limit(inner);
        victim.is_some()
    }

    /// One line per [`WARN_EVERY`], however many connections hit the limits.
    fn warn_at_limit(&self, inner: &mut Inner) {
        if inner.last_warning.is_some_and(|at| self.clock.now().saturating_duration_since(at) < WARN_EVERY) {
            return;
        }
        let busiest = inner.per_client.iter().max_by_key(|(_, n)| **n);
        tracing::warn!(
            "connection limits reached: {} open (--max-connections {}, {} per client, the last {} kept for loopback); \
             closed {} connection(s) (idle, slow request bodies, anonymous WebSockets) and refused {} since the \
             last warning; the busiest client, {}, holds {}. If these are real clients, raise --max-connections or \
             --max-connections-per-client",
            inner.open.len(),
            self.limits.max,
            self.limits.per_client,
            self.limits.reserve(),
            inner.closed,
            inner.refused,
            busiest.map_or_else(|| "none".to_owned(), |(client, _)| client.to_string()),
            busiest.map_or(0, |(_, n)| *n),
        );
        inner.closed = 0;
        inner.refused = 0;
        inner.last_warning = Some(self.clock.now());
    }

    /// Applies `change` to a connection's state, unless it is closing or a WebSocket.
    fn update(&self, id: u64, change: impl FnOnce(State) -> State) {
        if let Some(open) = self.lock().open.get_mut(&id)
            && !matches!(open.state, State::Upgraded { .. } | State::Closing)
        {
            open.state = change(open.state);
        }
    }

    /// The connection became a WebSocket; an anonymous one past the client's share closes
    /// the client's oldest anonymous WebSocket (rule 4).
    fn upgraded(&self, id: u64, anonymous: bool) {
        let now = self.clock.now();
        let mut inner = self.lock();
        let Some(open) = inner.open.get_mut(&id) else { return };
        if open.state == State::Closing {
            return;
        }
        open.state = State::Upgraded { anonymous, since: now };
        let client = open.client;
        if !anonymous || open.exempt {
            return;
        }
        let mut theirs: Vec<(Instant, u64)> = inner
            .open
            .iter()
            .filter(|(_, o)| o.client == client)
            .filter_map(|(id, o)| match o.state {
                State::Upgraded { anonymous: true, since } => Some((since, *id)),
                _ => None,
            })
            .collect();
        let share = self.limits.anonymous_sockets();
        if theirs.len() > share {
            theirs.sort_unstable();
            for (_, id) in &theirs[..theirs.len() - share] {
                inner.close(*id);
            }
            self.warn_at_limit(&mut inner);
        }
    }

    #[cfg(test)]
    fn state(&self, id: u64) -> Option<State> {
        self.lock().open.get(&id).map(|o| o.state)
    }
}

/// A connection's place in the [`Registry`], given back when its socket closes.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) id: u64,
    /// Told when the registry closes this connection to make room.
    pub(super) close: Arc<Closer>,
    registry: Arc<Registry>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        if let Some(open) = inner.open.remove(&self.id)
            && let Some(n) = inner.per_client.get_mut(&open.client)
        {
            *n -= 1;
            if *n == 0 {
                inner.per_client.remove(&open.client);
            }
        }
    }
}

/// A request being served: the connection is busy until the response body is sent (or dropped).
#[derive(Debug)]
pub(super) struct Busy {
    registry: Arc<Registry>,
    id: u64,
}

impl Busy {
    /// A request has arrived; `with_body` when its body is still to be read.
    pub(super) fn start(registry: Arc<Registry>, id: u64, with_body: bool) -> Self {
        let now = registry.clock.now();
        registry.update(id, |state| match state {
            State::Busy(n) => State::Busy(n + 1),
            _ if with_body => State::Reading(now),
            _ => State::Busy(1),
        });
        Self { registry, id }
    }

    /// The request's body has been read (or dropped): the connection is serving it.
    pub(super) fn body_read(&self) {
        self.registry.update(self.id, |state| match state {
            State::Reading(_) => State::Busy(1),
            other => other,
        });
    }

    /// The response switched protocols: the connection is a WebSocket from now on.
    pub(super) fn upgraded(&self, anonymous: bool) {
        self.registry.upgraded(self.id, anonymous);
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let now = self.registry.clock.now();
        self.registry.update(self.id, |state| match state {
            State::Busy(n) if n > 1 => State::Busy(n - 1),
            _ => State::Idle(now),
        });
    }
}

#[cfg(test)]
mod tests;
