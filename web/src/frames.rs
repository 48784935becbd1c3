//! Every message the WebSocket fans out, as a [`Frame`]: encoded once, as is and without the people
//! it names (for anonymous viewers of a server with tokens), the bytes shared by every socket. The
//! lab's and the alerts' events are relayed here; the hub's ticks, details and snapshots in
//! [`super::live`].

use std::sync::Arc;

use axum::extract::ws::Utf8Bytes;
use shared::ServerMessage;
use shared::alerts::AlertEvent;
use shared::lab::LabEvent;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use lab::Lab;
use team::alerts::Alerts;

/// Encoded lab events a slow socket may fall behind before it gets a fresh status.
const LAB_BACKLOG: usize = 256;
/// Encoded alert events a slow socket may fall behind before it skips some.
const ALERT_BACKLOG: usize = 256;

/// How much of who runs what a viewer may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Everything: a signed-in viewer, or anyone on a server without tokens.
    Full,
    /// Processes without user, executable, command line or container
    /// ([`shared::processes::GpuProcess::redact`]): an anonymous viewer of a server with tokens.
    Redacted,
}

/// Serializes a message to JSON text. Our own types always serialize.
pub fn encode(message: &ServerMessage) -> Utf8Bytes {
    serde_json::to_string(message).expect("wire types serialize infallibly").into()
}

/// One message, serialized for both kinds of viewer; a message that names nobody shares one buffer.
#[derive(Debug, Clone)]
pub struct Frame {
    /// For a tick or snapshot, the last tick it covers; `None` for other messages.
    pub seq: Option<u64>,
    /// The message for [`Visibility::Full`].
    full: Utf8Bytes,
    /// The message for [`Visibility::Redacted`]: the same bytes when it names nobody, a redacted
    /// encoding otherwise; `None` when there is none (a server that admits no anonymous viewers
    /// makes none), and such a viewer then gets nothing.
    redacted: Option<Utf8Bytes>,
}

impl Frame {
    /// `message`, and `hidden` (the same without names) when it differs.
    fn new(message: &ServerMessage, hidden: Option<&ServerMessage>) -> Self {
        let full = encode(message);
        let redacted = Some(hidden.map_or_else(|| full.clone(), encode));
        Self { seq: None, full, redacted }
    }

    /// A message that names nobody: one encoding for every viewer.
    pub fn shared(seq: Option<u64>, message: &ServerMessage) -> Self {
        let full = encode(message);
        Self { seq, redacted: Some(full.clone()), full }
    }

    /// A message for signed-in viewers, and its redacted encoding where one was made.
    pub fn with_redacted(seq: Option<u64>, full: &ServerMessage, redacted: Option<&ServerMessage>) -> Self {
        Self { seq, full: encode(full), redacted: redacted.map(encode) }
    }

    /// A lab event, and the same without the people it names ([`LabEvent::hide_people`]).
    pub fn lab(event: LabEvent) -> Self {
        let mut hidden = event.clone();
        let named = hidden.hide_people();
        Self::new(&ServerMessage::Lab(event), named.then_some(ServerMessage::Lab(hidden)).as_ref())
    }

    /// An alert event, and the same without its user ([`shared::alerts::Alert::redact`]).
    pub fn alert(event: AlertEvent) -> Self {
        let mut hidden = event.clone();
        hidden.alert.redact();
        let named = hidden.alert.redacted;
        Self::new(&ServerMessage::Alert(event), named.then_some(ServerMessage::Alert(hidden)).as_ref())
    }

    /// The bytes a viewer with `visibility` gets, or `None` when this frame has nothing for them.
    pub fn text_for(&self, visibility: Visibility) -> Option<&Utf8Bytes> {
        match visibility {
            Visibility::Full => Some(&self.full),
            Visibility::Redacted => self.redacted.as_ref(),
        }
    }
}

/// The lab's events as frames.
#[derive(Debug, Clone)]
pub struct LabFrames {
    frames: broadcast::Sender<Frame>,
}

impl LabFrames {
    /// Starts encoding what `lab` publishes, on a task that ends when the lab's event channel closes.
    /// If the task itself falls behind, the lab's current status replaces what it missed.
    pub fn relay(lab: &Arc<Lab>) -> Self {
        let (frames, _) = broadcast::channel(LAB_BACKLOG);
        let mut events = lab.subscribe();
        let lab = Arc::downgrade(lab);
        let sender = frames.clone();
        tokio::spawn(async move {
            loop {
                let event = match events.recv().await {
                    Ok(event) => event,
                    Err(RecvError::Lagged(_)) => match lab.upgrade() {
                        Some(lab) => LabEvent::Status(lab.status()),
                        None => return,
                    },
                    Err(RecvError::Closed) => return,
                };
                // No socket listening is normal.
                let _ = sender.send(Frame::lab(event));
            }
        });
        Self { frames }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Frame> {
        self.frames.subscribe()
    }
}

/// The lab's current status as a frame, to resynchronise a socket that fell behind.
pub fn lab_status(lab: &Lab) -> Frame {
    Frame::lab(LabEvent::Status(lab.status()))
}

/// The alerts' events as frames.
#[derive(Debug, Clone)]
pub struct AlertFrames {
    frames: broadcast::Sender<Frame>,
}

impl AlertFrames {
    /// Starts encoding what `alerts` publishes, on a task that ends when their channel closes.
    /// A relay that falls behind skips what it missed (the page's next `GET /api/alerts` has it).
    pub fn relay(alerts: &Alerts) -> Self {
        let (frames, _) = broadcast::channel(ALERT_BACKLOG);
        let mut events = alerts.subscribe();
        let sender = frames.clone();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(event) => {
                        let _ = sender.send(Frame::alert(event));
                    }
                    Err(RecvError::Lagged(skipped)) => tracing::warn!(skipped, "alert events skipped for sockets"),
                    Err(RecvError::Closed) => return,
                }
            }
        });
        Self { frames }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Frame> {
        self.frames.subscribe()
    }
}
