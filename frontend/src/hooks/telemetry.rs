//! `use_telemetry()`: the page's one WebSocket to `/ws`, reconnected with backoff,
//! feeding the dashboard state, the lab's queue and progress, and alerts.

use std::{
    cell::{Cell, RefCell},
    rc::{Rc, Weak},
    time::Duration,
};

use leptos::{logging, prelude::*};
use send_wrapper::SendWrapper;
use shared::{ClientMessage, Details, ServerMessage, Snapshot};
use wasm_bindgen::{JsCast, prelude::Closure};
use web_sys::{CloseEvent, Event, MessageEvent, WebSocket};

use super::session::Session;
use crate::state::{DashboardState, TickOutcome, alerts::AlertsState, lab::LabState};

/// Wait before the first reconnect; doubled after each failure up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Where the page stands with the server, as shown in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionStatus {
    /// No snapshot received yet.
    Connecting,
    /// A snapshot arrived and the socket is open.
    Live,
    /// The socket closed after having been live; a new one is on its way.
    Reconnecting,
}

impl ConnectionStatus {
    /// The word shown in `#conn-status`, also used as its CSS class.
    pub fn label(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Live => "live",
            Self::Reconnecting => "reconnecting",
        }
    }
}

/// Read side of the telemetry stream.
#[derive(Debug, Clone, Copy)]
pub struct Telemetry {
    pub state: ReadSignal<DashboardState>,
    pub status: ReadSignal<ConnectionStatus>,
    /// Counts snapshots: each (re)connection brings one, and state not sent on connect (the lab's) reloads on it.
    pub snapshots: ReadSignal<u32>,
    /// When the last snapshot or tick arrived (browser clock, ms): the stale banner counts from it.
    pub last_update: ReadSignal<Option<f64>>,
}

/// Opens the WebSocket once `session` may view, reopens it at every login or
/// logout (so it carries the new cookie), and keeps it open for as long as the
/// calling component lives. `lab` receives the lab's events, `alerts` the alerts' (and a
/// newly firing alert that the caller subscribed to raises a browser notification).
pub fn use_telemetry(session: Session, lab: WriteSignal<LabState>, alerts: WriteSignal<AlertsState>) -> Telemetry {
    let (state, set_state) = signal(DashboardState::default());
    let (status, set_status) = signal(ConnectionStatus::Connecting);
    let (snapshots, set_snapshots) = signal(0u32);
    let (last_update, set_last_update) = signal(None::<f64>);
    let link = Rc::new(Link {
        set_state,
        set_status,
        set_snapshots,
        set_last_update,
        lab,
        alerts,
        connection: RefCell::new(None),
        retry: Cell::new(FIRST_RETRY),
        resync_requested: Cell::new(false),
        paused: Cell::new(true),
        shut_down: Cell::new(false),
    });
    // `Some(epoch)` while the caller may view: each new value is a new identity, so a new socket.
    let identity = Memo::new(move |_| session.can_view().filter(|may| *may).map(|_| session.epoch.get()));
    Effect::new({
        let link = link.clone();
        move |_| match identity.get() {
            Some(_) => Link::restart(&link),
            None => link.pause(),
        }
    });
    // The browser is single-threaded; the wrapper only satisfies `on_cleanup`'s bounds.
    let link = SendWrapper::new(link);
    on_cleanup(move || link.shut_down());
    Telemetry { state, status, snapshots, last_update }
}

/// The socket and the state it feeds, shared by the socket's callbacks (which
/// hold it weakly, so dropping the hook's `Rc` ends everything).
struct Link {
    set_state: WriteSignal<DashboardState>,
    set_status: WriteSignal<ConnectionStatus>,
    set_snapshots: WriteSignal<u32>,
    set_last_update: WriteSignal<Option<f64>>,
    lab: WriteSignal<LabState>,
    alerts: WriteSignal<AlertsState>,
    connection: RefCell<Option<Connection>>,
    retry: Cell<Duration>,
    /// A resync is asked for once per gap, not once per tick after it.
    resync_requested: Cell<bool>,
    /// No socket wanted (nobody logged in where viewing needs a token).
    paused: Cell<bool>,
    shut_down: Cell<bool>,
}

impl Link {
    /// Drops any socket and opens a fresh one at once.
    fn restart(link: &Rc<Self>) {
        link.paused.set(false);
        link.connection.borrow_mut().take();
        link.retry.set(FIRST_RETRY);
        link.resync_requested.set(false);
        Self::connect(link);
    }

    fn pause(&self) {
        self.paused.set(true);
        self.connection.borrow_mut().take();
    }

    fn connect(link: &Rc<Self>) {
        if link.shut_down.get() || link.paused.get() {
            return;
        }
        let Some(url) = socket_url() else {
            logging::error!("gpudash: cannot tell the page's address, so cannot open /ws");
            return;
        };
        match Connection::open(&url, Rc::downgrade(link)) {
            Ok(connection) => *link.connection.borrow_mut() = Some(connection),
            Err(err) => {
                logging::warn!("gpudash: cannot open {url}: {err:?}");
                Self::retry_later(link);
            }
        }
    }

    fn retry_later(link: &Rc<Self>) {
        if link.shut_down.get() || link.paused.get() {
            return;
        }
        let delay = link.retry.get();
        link.retry.set((delay * 2).min(MAX_RETRY));
        let weak = Rc::downgrade(link);
        set_timeout(
            move || {
                if let Some(link) = weak.upgrade() {
                    Self::connect(&link);
                }
            },
            delay,
        );
    }

    fn on_text(&self, text: &str) {
        let message = match serde_json::from_str::<ServerMessage>(text) {
            Ok(message) => message,
            Err(err) => {
                logging::warn!("gpudash: ignoring a message the page cannot read ({err}): {text:.200}");
                return;
            }
        };
        match message {
            ServerMessage::Snapshot(Snapshot {
                seq,
                host,
                devices,
                latest,
                history,
                health,
                processes,
                workload_problems,
            }) => {
                let details = Details { health, processes, workload_problems, scheduled: Vec::new() };
                self.set_state.update(|state| state.apply_snapshot(seq, host, devices, latest, history, details));
                self.set_status.set(ConnectionStatus::Live);
                self.retry.set(FIRST_RETRY);
                self.resync_requested.set(false);
                self.set_snapshots.update(|n| *n = n.wrapping_add(1));
                self.set_last_update.set(Some(js_sys::Date::now()));
            }
            ServerMessage::Tick(tick) => {
                let mut outcome = TickOutcome::Ignored;
                self.set_state.maybe_update(|state| {
                    outcome = state.apply_tick(tick);
                    outcome != TickOutcome::Ignored
                });
                if outcome != TickOutcome::Ignored {
                    self.set_last_update.set(Some(js_sys::Date::now()));
                }
                if outcome == TickOutcome::AppliedAfterGap {
                    self.request_resync();
                }
            }
            ServerMessage::Error { message } => logging::warn!("gpudash server says: {message}"),
            ServerMessage::Details(details) => self.set_state.update(|state| state.apply_details(details)),
            // Applied here, not through a signal of "the last event", so no event is lost between renders.
            ServerMessage::Lab(event) => self.lab.update(|lab| lab.apply(event)),
            ServerMessage::Alert(event) => {
                let mut raise = None;
                self.alerts.update(|alerts| raise = alerts.apply_event(event));
                if let Some(alert) = raise {
                    super::notify::show(&alert);
                }
            }
        }
    }

    fn on_closed(link: &Rc<Self>) {
        // Having been live, the page shows stale figures until the next snapshot.
        link.set_status.update(|status| {
            if *status == ConnectionStatus::Live {
                *status = ConnectionStatus::Reconnecting;
            }
        });
        Self::retry_later(link);
    }

    fn request_resync(&self) {
        if self.resync_requested.replace(true) {
            return;
        }
        let Ok(text) = serde_json::to_string(&ClientMessage::Resync {}) else {
            return;
        };
        if let Some(connection) = self.connection.borrow().as_ref()
            && let Err(err) = connection.socket.send_with_str(&text)
        {
            logging::warn!("gpudash: cannot ask for a resync: {err:?}");
        }
    }

    fn shut_down(&self) {
        self.shut_down.set(true);
        self.connection.borrow_mut().take();
    }
}

/// An open socket and the callbacks it calls, dropped together.
struct Connection {
    socket: WebSocket,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_close: Closure<dyn FnMut(CloseEvent)>,
    _on_error: Closure<dyn FnMut(Event)>,
}

impl Connection {
    fn open(url: &str, link: Weak<Link>) -> Result<Self, wasm_bindgen::JsValue> {
        let socket = WebSocket::new(url)?;
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new({
            let link = link.clone();
            move |event: MessageEvent| match (link.upgrade(), event.data().as_string()) {
                (Some(link), Some(text)) => link.on_text(&text),
                (Some(_), None) => logging::warn!("gpudash: ignoring a binary frame"),
                (None, _) => {}
            }
        });
        let on_close = Closure::<dyn FnMut(CloseEvent)>::new(move |_: CloseEvent| {
            if let Some(link) = link.upgrade() {
                Link::on_closed(&link);
            }
        });
        // Browsers follow an error with a close; closing here makes sure of it,
        // and the close handler reconnects.
        let on_error = Closure::<dyn FnMut(Event)>::new({
            let socket = socket.clone();
            move |_: Event| {
                logging::warn!("gpudash: WebSocket error; reconnecting");
                let _ = socket.close();
            }
        });
        socket.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        socket.set_onclose(Some(on_close.as_ref().unchecked_ref()));
        socket.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        Ok(Self { socket, _on_message: on_message, _on_close: on_close, _on_error: on_error })
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Detach first so a closing socket cannot call into dropped closures.
        self.socket.set_onmessage(None);
        self.socket.set_onclose(None);
        self.socket.set_onerror(None);
        let _ = self.socket.close();
    }
}

/// `ws://host/ws`, or `wss://` when the page came over HTTPS.
fn socket_url() -> Option<String> {
    let location = window().location();
    let scheme = if location.protocol().ok()? == "https:" { "wss" } else { "ws" };
    Some(format!("{scheme}://{}/ws", location.host().ok()?))
}
