//! The accept loop: every TCP (or TLS) connection served by hyper with a
//! request-head timeout and a request-body deadline, under connection limits
//! (in all, per client, a reserve for loopback; see [`connections`]) that close
//! idle connections, trickling bodies and anonymous WebSockets to make room, so
//! a flood of sockets cannot lock anyone out.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use base::clock::Clock;

use axum::Router;
use axum::body::Bytes;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::IntoResponse;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use ipnet::IpNet;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::ApiError;
use super::local_user::ConnectionOwner;
use super::tls::{self, PeerAddr};

mod connections;

use connections::{Busy, Limits, Registry, Slot};

/// Connections served at once when `--max-connections` is not given (and open files allow).
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// A connection must send a complete request head within this long of opening, or of its
/// previous response: a trickling client (slowloris) and an idle keep-alive both close then.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one client address (an IPv6 /64) may hold when `--max-connections-per-client` is not given.
pub const DEFAULT_MAX_PER_CLIENT: usize = 64;
/// A request's body must have arrived within this long of its head: with bodies of at most
/// 64 KiB that is a rate of at least 13 KiB/s, and a client trickling one holds its slot no longer.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(5);
/// Open files kept for everything but connections: the database, NVML, the lab, logs.
const RESERVED_FILES: u64 = 128;
/// After the shutdown signal, requests in flight get this long to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// At most one warning about failing accepts this often.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// How many connections are served at once, and how long a request head and body may take.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Open connections (plain, TLS and WebSockets alike); past it one is closed to make room.
    pub max: usize,
    /// Open connections per client address (`--max-connections-per-client`); a quarter of it
    /// is how many anonymous WebSockets one client may hold.
    pub per_client: usize,
    /// Peers exempt from `per_client`: the trusted proxies, which carry everyone.
    pub exempt: Vec<IpNet>,
    /// See [`HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// See [`BODY_TIMEOUT`].
    pub body_timeout: Duration,
    /// What idle connections, slow bodies and the warnings' spacing are timed on.
    pub clock: Clock,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max: DEFAULT_MAX_CONNECTIONS,
            per_client: DEFAULT_MAX_PER_CLIENT,
            exempt: Vec::new(),
            header_timeout: HEADER_TIMEOUT,
            body_timeout: BODY_TIMEOUT,
            clock: Clock::system(),
        }
    }
}

/// Put in a `101 Switching Protocols` response's extensions by the WebSocket handler when the
/// caller is anonymous: such a socket may be closed to make room.
#[derive(Debug, Clone, Copy)]
pub struct AnonymousSocket;

/// Connections the kernel queues before gpudash accepts them (capped by `net.core.somaxconn`). A
/// burst of a thousand reconnecting sockets must not crowd out an admin's SYN: a dropped SYN is sent
/// again only after a second (the flood bench saw exactly that with tokio's default of 1024).
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listening socket on `addr` with a backlog of [`LISTEN_BACKLOG`].
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Raises the soft open-file limit (`RLIMIT_NOFILE`) to the hard one; returns it, or `None` if unknown.
pub fn raise_open_file_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => {
            tracing::info!("open-file limit (RLIMIT_NOFILE): {limit}");
            Some(limit)
        }
        Err(e) => {
            tracing::warn!("cannot read or raise the open-file limit (RLIMIT_NOFILE): {e}");
            None
        }
    }
}

/// The connection limit: `requested` (or the default), lowered to what `open_files` leaves for connections.
pub fn max_connections(requested: Option<usize>, open_files: Option<u64>) -> usize {
    let wanted = requested.unwrap_or(DEFAULT_MAX_CONNECTIONS);
    let Some(open_files) = open_files else { return wanted };
    let room = usize::try_from(open_files.saturating_sub(RESERVED_FILES)).unwrap_or(usize::MAX).max(1);
    if wanted > room && requested.is_some() {
        tracing::warn!(
            "--max-connections {wanted} needs more open files than RLIMIT_NOFILE {open_files} allows; serving at \
             most {room} connections. Raise the limit (LimitNOFILE= in the systemd unit, `ulimit -n`)"
        );
    }
    wanted.min(room)
}

/// Serves `app` on `listener` (through `tls` when given) until `stop` turns `true`, then lets
/// requests in flight finish for up to [`SHUTDOWN_GRACE`].
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let shared = Arc::new(Shared {
        app,
        registry: Arc::new(Registry::new(
            Limits { max: limits.max, per_client: limits.per_client, exempt: limits.exempt },
            limits.clock.clone(),
        )),
        header_timeout: limits.header_timeout,
        body_timeout: limits.body_timeout,
        stop: stop.clone(),
    });
    let local = listener.local_addr()?;
    let mut connections = JoinSet::new();
    let mut last_accept_warning: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            // An IPv4 client of a dual-stack listener arrives as ::ffff:a.b.c.d: every rule (trusted
            // proxies, loopback, per-client counts, the audit log) sees it as the IPv4 address it is.
            Ok((tcp, peer)) => (tcp, SocketAddr::new(peer.ip().to_canonical(), peer.port())),
            Err(e) => {
                // Out of file descriptors (EMFILE) or the like: back off rather than spin.
                if last_accept_warning.is_none_or(|at| limits.clock.now().saturating_duration_since(at) >= WARN_EVERY) {
                    tracing::warn!("cannot accept connections: {e}; lower --max-connections or raise LimitNOFILE");
                    last_accept_warning = Some(limits.clock.now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let own = tcp.local_addr().map(|a| SocketAddr::new(a.ip().to_canonical(), a.port())).unwrap_or(local);
        // From the machine itself each user counts on their own, so the owner of the client's
        // socket is asked of the kernel now: one netlink round trip, tens of microseconds.
        let uid = connections::is_home(peer.ip()).then(|| super::sock_diag::owner(peer, own)).flatten();
        let Some(slot) = shared.registry.admit(peer.ip(), uid) else { continue };
        let owner = match uid {
            Some(uid) => ConnectionOwner::known(peer, own, uid),
            None => ConnectionOwner::new(peer, own),
        };
        // Small WebSocket frames and responses go out at once, not after Nagle's wait for the
        // peer's delayed ACK (the budgets test's tall window: tick p99 17-25 ms without, 11-14 ms with).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, "cannot set TCP_NODELAY: {e}");
        }
        let shared = shared.clone();
        match &tls {
            None => connections.spawn(serve_connection(tcp, slot, owner, false, shared)),
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                connections.spawn(async move {
                    let (closed, mut stop) = (slot.close.clone(), shared.stop.clone());
                    let stream = tokio::select! {
                        stream = tls::handshake(&acceptor, tcp, peer) => stream,
                        () = closed.closed() => None,
                        _ = stop.wait_for(|stopping| *stopping) => None,
                    };
                    if let Some(stream) = stream {
                        let certified = tls::verified_client(&stream);
                        serve_connection(stream, slot, owner, certified, shared).await;
                    }
                })
            }
        };
    }
    drop(listener);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async { while connections.join_next().await.is_some() {} });
    if drained.await.is_err() {
        tracing::warn!("{} connection(s) still busy after {SHUTDOWN_GRACE:?}; closing them", connections.len());
    }
    Ok(())
}

/// What every connection's task needs.
struct Shared {
    app: Router,
    registry: Arc<Registry>,
    header_timeout: Duration,
    body_timeout: Duration,
    stop: watch::Receiver<bool>,
}

/// Serves HTTP/1.1 (and upgrades to WebSockets) on `io` until the client leaves, the
/// registry closes it to make room, or the server stops. `certified`: the client presented a
/// certificate `--metrics-client-ca` verified.
async fn serve_connection<I>(io: I, slot: Slot, owner: ConnectionOwner, certified: bool, shared: Arc<Shared>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = owner.client;
    let (id, closed) = (slot.id, slot.close.clone());
    let router = TowerToHyperService::new(shared.app.clone());
    let (registry, body_timeout) = (shared.registry.clone(), shared.body_timeout);
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(PeerAddr(peer)));
        request.extensions_mut().insert(owner.clone());
        if certified {
            request.extensions_mut().insert(tls::VerifiedClient);
        }
        let with_body = !request.body().is_end_stream();
        let busy = Arc::new(Busy::start(registry.clone(), id, with_body));
        let late = Arc::new(AtomicBool::new(false));
        let request = request.map(|body| DeadlineBody {
            body,
            deadline: with_body.then(|| Box::pin(tokio::time::sleep(body_timeout))),
            busy: busy.clone(),
            late: late.clone(),
        });
        let response = hyper::service::Service::call(&router, request);
        async move {
            let mut response = response.await?;
            if late.load(Ordering::Relaxed) {
                response = body_too_slow(body_timeout);
            }
            if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                busy.upgraded(response.extensions().get::<AnonymousSocket>().is_some());
            }
            Ok::<_, Infallible>(response.map(|body| BusyBody { body, _busy: busy }))
        }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.header_timeout)
        .serve_connection(TokioIo::new(Held::new(io, slot)), service)
        .with_upgrades();
    tokio::pin!(connection);
    let mut stop = shared.stop.clone();
    tokio::select! {
        served = connection.as_mut() => {
            if let Err(e) = served {
                tracing::debug!(%peer, "connection closed: {e}");
            }
            return;
        }
        // Dropping the connection closes the socket.
        () = closed.closed() => return,
        _ = stop.wait_for(|stopping| *stopping) => connection.as_mut().graceful_shutdown(),
    }
    let _ = connection.await;
}

/// The answer to a request whose body did not arrive in time; the connection closes after it.
fn body_too_slow(timeout: Duration) -> axum::response::Response {
    let message = format!(
        "the request body did not arrive within {} s of its head; send it whole at once (bodies here are small, \
         at most 64 KiB)",
        timeout.as_secs()
    );
    let mut response = ApiError { status: StatusCode::REQUEST_TIMEOUT, message }.into_response();
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request body that must arrive within a deadline of its head (see [`BODY_TIMEOUT`]); it
/// tells the registry when it has been read, so a trickling one can be closed to make room.
struct DeadlineBody {
    body: Incoming,
    /// `None` for a request without a body.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    busy: Arc<Busy>,
    /// Set when the deadline passed: the response becomes [`body_too_slow`].
    late: Arc<AtomicBool>,
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("the request body did not arrive in time")]
    TooSlow,
    #[error("{0}")]
    Read(#[from] hyper::Error),
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(None) => {
                this.busy.body_read();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.busy.body_read();
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Pending => match this.deadline.as_mut().map(|deadline| deadline.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => {
                    this.late.store(true, Ordering::Relaxed);
                    this.busy.body_read();
                    Poll::Ready(Some(Err(BodyError::TooSlow)))
                }
                _ => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for DeadlineBody {
    fn drop(&mut self) {
        self.busy.body_read();
    }
}

/// A response body that keeps its connection marked busy until it is sent.
struct BusyBody {
    body: axum::body::Body,
    _busy: Arc<Busy>,
}

impl HttpBody for BusyBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A socket holding its [`Slot`]: the slot outlives the HTTP connection when the socket
/// becomes a WebSocket, so WebSockets count against the limit until they close; and once the
/// registry closes the connection, reads and writes fail, which ends a WebSocket's task too.
struct Held<I> {
    io: I,
    slot: Slot,
    /// Completes when the registry closes this connection.
    closed: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl<I> Held<I> {
    fn new(io: I, slot: Slot) -> Self {
        let closer = slot.close.clone();
        Self { io, slot, closed: Box::pin(async move { closer.closed().await }) }
    }

    /// An error once the registry has closed this connection (and registers to hear of it).
    fn check_open(&mut self, cx: &mut Context<'_>) -> Result<(), std::io::Error> {
        if self.slot.close.is_closing() || self.closed.as_mut().poll(cx).is_ready() {
            return Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "closed to make room"));
        }
        Ok(())
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Held<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if let Err(e) = self.check_open(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Held<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        if let Err(e) = self.check_open(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if let Err(e) = self.check_open(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
