//! `use_alerts()`: alerts as the page sees them. Loads the firing alerts (for the header
//! badge) and the caller's subscriptions at start and after every (re)connection, the
//! Alerts tab's list on demand, and sends silences and subscriptions. The socket's
//! `alert` events are applied by [`super::telemetry`], which raises the notifications.

use leptos::{logging, prelude::*, task::spawn_local};
use shared::alerts::{AlertsResponse, Silence, SilenceRequest, Subscription, SubscriptionKind, SubscriptionsResponse};

use super::{
    api::{ApiFailure, delete, get_json, post_json},
    notify::{self, Permission},
    session::Session,
    telemetry::Telemetry,
};
use crate::state::alerts::{AlertFilter, AlertsState};

/// Every firing alert, whatever the tab's filter: the badge's colour needs them all.
const FIRING_URL: &str = "/api/alerts?state=firing&limit=1000";
const SUBSCRIPTIONS_URL: &str = "/api/alerts/subscriptions";

#[derive(Debug, Clone, Copy)]
pub struct Alerts {
    pub state: RwSignal<AlertsState>,
    /// The Alerts tab's filters.
    pub filter: RwSignal<AlertFilter>,
    /// Why the alerts could not be loaded.
    pub load_error: RwSignal<Option<String>>,
    /// Why the subscriptions could not be loaded or changed (e.g. "sign in to subscribe").
    pub subscribe_error: RwSignal<Option<String>>,
    /// What the browser lets the page do with notifications.
    pub permission: RwSignal<Permission>,
    session: Session,
}

/// Reloads whenever a snapshot arrives on the socket `telemetry` owns (events missed
/// while it was down are in the answer).
pub fn use_alerts(state: RwSignal<AlertsState>, telemetry: Telemetry, session: Session) -> Alerts {
    let alerts = Alerts {
        state,
        filter: RwSignal::new(AlertFilter::default()),
        load_error: RwSignal::new(None),
        subscribe_error: RwSignal::new(None),
        permission: RwSignal::new(Permission::current()),
        session,
    };
    Effect::new(move |_| {
        if telemetry.snapshots.get() > 0 {
            spawn_local(alerts.reload());
        }
    });
    alerts
}

impl Alerts {
    async fn reload(self) {
        self.fetch(FIRING_URL).await;
        match get_json::<SubscriptionsResponse>(SUBSCRIPTIONS_URL).await {
            Ok(subscriptions) => {
                self.state.try_update(|s| s.subscriptions = Some(subscriptions));
                self.subscribe_error.try_set(None);
            }
            Err(failure) => {
                logging::warn!("gpudash: loading the subscriptions: {}", failure.message);
                self.subscribe_error.try_set(Some(failure.message.clone()));
                self.session.unauthorized(&failure);
            }
        }
    }

    /// `GET /api/alerts` for the tab's filter.
    pub fn load_list(self) {
        let url = self.filter.with_untracked(AlertFilter::url);
        spawn_local(self.fetch_owned(url));
    }

    async fn fetch_owned(self, url: String) {
        self.fetch(&url).await;
    }

    async fn fetch(self, url: &str) {
        match get_json::<AlertsResponse>(url).await {
            Ok(answer) => {
                self.state.try_update(|s| s.apply_response(answer));
                self.load_error.try_set(None);
            }
            Err(failure) => {
                logging::warn!("gpudash: loading alerts: {}", failure.message);
                self.load_error.try_set(Some(format!("Could not load the alerts: {}", failure.message)));
                self.session.unauthorized(&failure);
            }
        }
    }

    /// `POST /api/alerts/silences`; the alert's `alert` event marks it silenced.
    pub async fn silence(self, request: SilenceRequest) -> Result<Silence, ApiFailure> {
        let body = serde_json::to_value(&request).map_err(|e| ApiFailure { status: 0, message: e.to_string() })?;
        let silence: Silence = post_json("/api/alerts/silences", Some(&body)).await?;
        self.state.update(|s| {
            s.silences.retain(|known| known.id != silence.id);
            s.silences.push(silence.clone());
        });
        Ok(silence)
    }

    /// `DELETE /api/alerts/silences/{id}`.
    pub async fn lift(self, id: u64) -> Result<(), ApiFailure> {
        delete(&format!("/api/alerts/silences/{id}")).await?;
        self.state.update(|s| s.lift(id));
        Ok(())
    }

    /// Turns a subscription on (asking for the notification permission within the click) or off.
    pub fn toggle(self, kind: SubscriptionKind, on: bool) {
        let existing = self.state.with_untracked(|s| s.subscription(&kind).map(|s| s.id));
        let asked = on.then(notify::request);
        spawn_local(async move {
            let outcome = match (on, existing) {
                (true, None) => self.subscribe(kind).await,
                (false, Some(id)) => self.unsubscribe(id).await,
                _ => Ok(()),
            };
            self.subscribe_error.try_set(outcome.err().map(|f| f.message));
            if let Some(asked) = asked {
                self.permission.try_set(asked.await);
            }
        });
    }

    async fn subscribe(self, kind: SubscriptionKind) -> Result<(), ApiFailure> {
        let body = serde_json::to_value(&kind).map_err(|e| ApiFailure { status: 0, message: e.to_string() })?;
        let added: Subscription = post_json(SUBSCRIPTIONS_URL, Some(&body)).await?;
        self.state.update(|s| {
            let list = s
                .subscriptions
                .get_or_insert_with(|| SubscriptionsResponse { user: added.user.clone(), subscriptions: Vec::new() });
            list.subscriptions.retain(|known| known.id != added.id);
            list.subscriptions.push(added);
        });
        Ok(())
    }

    async fn unsubscribe(self, id: u64) -> Result<(), ApiFailure> {
        delete(&format!("{SUBSCRIPTIONS_URL}/{id}")).await?;
        self.state.update(|s| {
            if let Some(list) = &mut s.subscriptions {
                list.subscriptions.retain(|known| known.id != id);
            }
        });
        Ok(())
    }
}
