//! `/ws`: a snapshot on connect, then every tick, shared bytes for all sockets.
//!
//! A socket that falls behind skips ticks and gets a fresh snapshot; it never
//! slows the sampler or the other sockets.
//!
//! An anonymous viewer of a server with tokens gets the redacted encoding of
//! each message (see [`Visibility`]), decided once, when the socket opens.
//!
//! The lab's and the alerts' events reach sockets as [`super::frames`], each encoded once for
//! every socket, the way the telemetry hub encodes ticks.

use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::response::Response;
use base::rate::Limiter;
use futures_util::{SinkExt, StreamExt};
use shared::{ClientMessage, ServerMessage};
use tokio::sync::broadcast::error::RecvError;

use super::AppState;
use super::api::visibility;
use super::auth::Caller;
use super::frames::{self, Frame, Visibility, encode};
use team::auth::SessionRef;

/// Largest message a browser may send; the only one it has is `{"type":"resync"}`.
const MAX_CLIENT_MESSAGE: usize = 4 * 1024;
/// Messages per second a client may send on average (bursts up to twice that).
const MESSAGES_PER_SECOND: u32 = 10;
/// What each socket reads into. Clients send only small messages, and tungstenite
/// zero-fills its whole read buffer (128 KiB by default, so 125 MiB for 1,000 sockets).
const READ_BUFFER: usize = MAX_CLIENT_MESSAGE;
/// A socket that cannot take a message for this long is dropped.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// `GET /ws`: upgrades to the telemetry stream.
pub async fn upgrade(
    ws: WebSocketUpgrade,
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let visibility = visibility(&state, caller.as_deref());
    // Anonymous sockets may be closed to make room at the connection limits (serve.rs). Without tokens
    // (and without --allow-anonymous) the only caller let in is the local user gpudash runs as: not a stranger.
    let strangers = state.auth.enabled() || state.allow_anonymous;
    let anonymous = strangers && caller.as_ref().is_none_or(|caller| caller.identity.anonymous);
    let session = caller.and_then(|Extension(caller)| caller.session);
    let mut response = ws
        .max_message_size(MAX_CLIENT_MESSAGE)
        .max_frame_size(MAX_CLIENT_MESSAGE)
        .read_buffer_size(READ_BUFFER)
        .on_upgrade(move |socket| stream(socket, state, visibility, session));
    if anonymous {
        response.extensions_mut().insert(super::serve::AnonymousSocket);
    }
    response
}

/// Why a socket's loop ended.
enum End {
    /// The peer left or the connection broke: nothing more to send.
    Gone,
    /// The peer sent more than [`MESSAGES_PER_SECOND`] allows.
    Flood,
    /// The peer sent a message larger than [`MAX_CLIENT_MESSAGE`].
    TooBig,
    /// The browser session the socket was opened with was logged out or expired.
    SessionEnded,
    /// The server is stopping: say so before closing.
    Shutdown,
}

async fn stream(socket: WebSocket, state: AppState, visibility: Visibility, session: Option<SessionRef>) {
    let (mut sink, mut incoming) = socket.split();
    // While this page watches, the GPM loop closes 1 s windows (5 s otherwise).
    let _watching = state.telemetry.watchers().watch();
    // Subscribe before taking the snapshot, so no tick falls between the two.
    let mut ticks = state.live_frames.subscribe();
    // GPU lab events (queue, progress, finished runs): a separate channel, forwarded as they come.
    let mut lab_events = state.lab_frames.subscribe();
    // Alerts fired, resolved or silenced.
    let mut alert_events = state.alert_frames.subscribe();
    let mut shutdown = state.shutdown.clone();
    // Twice the rate at once, then the rate: a page's burst of requests on opening is not a flood.
    let budget = Limiter::new(2 * MESSAGES_PER_SECOND, Duration::from_secs(2), &state.clock);
    let mut session_ends = state.auth.session_ends();
    // A socket opened without a session (a token, or anonymous) never expires this way.
    let expiry = session.map(|s| tokio::time::Instant::from_std(s.expires));
    let end = async {
        let mut last_seq = send_snapshot(&mut sink, &state, visibility).await?;
        loop {
            tokio::select! {
                tick = ticks.recv() => match tick {
                    // A tick the snapshot already covered.
                    Ok(frame) if frame.seq.is_some_and(|seq| seq <= last_seq) => {}
                    Ok(frame) => {
                        send_frame(&mut sink, &frame, visibility).await?;
                        last_seq = frame.seq.unwrap_or(last_seq);
                    }
                    Err(RecvError::Lagged(skipped)) => {
                        tracing::debug!(skipped, "slow WebSocket client resynchronised");
                        last_seq = send_snapshot(&mut sink, &state, visibility).await?;
                    }
                    Err(RecvError::Closed) => return Err(End::Shutdown),
                },
                lab = lab_events.recv() => match lab {
                    Ok(frame) => send_frame(&mut sink, &frame, visibility).await?,
                    // Fell behind on lab events: the current lab status replaces what was missed.
                    Err(RecvError::Lagged(_)) => send_frame(&mut sink, &frames::lab_status(&state.lab), visibility).await?,
                    Err(RecvError::Closed) => return Err(End::Shutdown),
                },
                alert = alert_events.recv() => match alert {
                    Ok(frame) => send_frame(&mut sink, &frame, visibility).await?,
                    // Fell behind: the page's next look at /api/alerts shows what was skipped.
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return Err(End::Shutdown),
                },
                message = incoming.next() => match message {
                    Some(Ok(_)) if budget.check().is_err() => return Err(End::Flood),
                    Some(Ok(Message::Text(text))) => match serde_json::from_str::<ClientMessage>(&text) {
                        Ok(ClientMessage::Resync {}) => last_seq = send_snapshot(&mut sink, &state, visibility).await?,
                        Err(e) => send_error(&mut sink, &format!(
                            "unrecognised message ({e}); the accepted message is {{\"type\":\"resync\"}}"
                        )).await?,
                    },
                    Some(Ok(Message::Binary(_))) => {
                        send_error(&mut sink, "binary messages are not accepted; send JSON text such as {\"type\":\"resync\"}").await?;
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Err(e)) if is_too_big(&e) => return Err(End::TooBig),
                    Some(Ok(Message::Close(_)) | Err(_)) | None => return Err(End::Gone),
                },
                _ = shutdown.changed() => return Err(End::Shutdown),
                Ok(()) = session_ends.changed() => {
                    if session.is_some_and(|s| !state.auth.session_alive(&s)) {
                        return Err(End::SessionEnded);
                    }
                }
                () = expires(expiry) => return Err(End::SessionEnded),
            }
        }
    };
    let result: Result<(), End> = end.await;
    let close = match result {
        Err(End::Shutdown) => Some(CloseFrame { code: close_code::AWAY, reason: "gpudash is shutting down".into() }),
        Err(End::Flood) => Some(CloseFrame {
            code: close_code::POLICY,
            reason: format!("too many messages: at most {MESSAGES_PER_SECOND} per second").into(),
        }),
        Err(End::TooBig) => Some(CloseFrame {
            code: close_code::SIZE,
            reason: format!("message too big: at most {MAX_CLIENT_MESSAGE} bytes").into(),
        }),
        Err(End::SessionEnded) => Some(CloseFrame {
            code: close_code::POLICY,
            reason: "your session ended (logged out or expired); log in again".into(),
        }),
        Ok(()) | Err(End::Gone) => None,
    };
    if let Some(close) = close {
        let _ = tokio::time::timeout(SEND_TIMEOUT, sink.send(Message::Close(Some(close)))).await;
    }
}

/// Ends at `at`, or never without one.
async fn expires(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The peer's message or frame exceeded the size limit (tungstenite's capacity error).
fn is_too_big(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if matches!(e.downcast_ref::<tungstenite::Error>(), Some(tungstenite::Error::Capacity(_))) {
            return true;
        }
        source = e.source();
    }
    false
}

type Sink = futures_util::stream::SplitSink<WebSocket, Message>;

async fn send(sink: &mut Sink, message: Message) -> Result<(), End> {
    match tokio::time::timeout(SEND_TIMEOUT, sink.send(message)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) | Err(_) => Err(End::Gone),
    }
}

/// Sends what `frame` holds for `visibility`, if anything.
async fn send_frame(sink: &mut Sink, frame: &Frame, visibility: Visibility) -> Result<(), End> {
    match frame.text_for(visibility) {
        Some(text) => send(sink, Message::Text(text.clone())).await,
        None => Ok(()),
    }
}

async fn send_snapshot(sink: &mut Sink, state: &AppState, visibility: Visibility) -> Result<u64, End> {
    let frame = state.live_frames.snapshot(visibility);
    send_frame(sink, &frame, visibility).await?;
    Ok(frame.seq.unwrap_or(0))
}

async fn send_error(sink: &mut Sink, message: &str) -> Result<(), End> {
    send(sink, Message::Text(encode(&ServerMessage::Error { message: message.to_owned() }))).await
}
