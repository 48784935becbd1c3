//! The alerts API: `GET /api/alerts` (stored alerts, silences, rules, webhooks), silences
//! (operators, audited) and each caller's own notification subscriptions.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use shared::alerts::{
    AlertState, AlertsResponse, Silence, SilenceInvalid, SilenceRequest, SubscriptionKind, SubscriptionsResponse,
};
use shared::auth::Role;

use super::Visibility;
use super::api::visibility;
use super::auth::Caller;
use super::error::blocking;
use super::{ApiError, AppState};
use store::alerts::{AlertFilter, AlertStoreError, SubscribeRefused};
use team::alerts::{SilenceRefused, parse_rule};
use team::audit::{Action, Outcome};
use telemetry::now_ms;

impl From<AlertStoreError> for ApiError {
    fn from(e: AlertStoreError) -> Self {
        ApiError::internal(format!("alerts: {e}"))
    }
}

impl From<SilenceRefused> for ApiError {
    fn from(e: SilenceRefused) -> Self {
        let status = match e {
            SilenceRefused::TooMany { .. } => StatusCode::CONFLICT,
            SilenceRefused::NotFound(_) => StatusCode::NOT_FOUND,
            SilenceRefused::NotYours { .. } => StatusCode::FORBIDDEN,
        };
        ApiError { status, message: e.to_string() }
    }
}

/// Query of `GET /api/alerts`; every value is checked by hand so the message can say what is allowed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    state: Option<String>,
    from: Option<String>,
    to: Option<String>,
    gpu: Option<String>,
    rule: Option<String>,
    limit: Option<String>,
}

const ACCEPTED: &str = "accepted: state, from, to, gpu, rule, limit";

fn whole<T: std::str::FromStr>(name: &str, value: &str, what: &str) -> Result<T, ApiError> {
    value.trim().parse().map_err(|_| ApiError::bad_request(format!("'{name}' = '{value}' is not {what}")))
}

fn filter(q: &ListQuery) -> Result<AlertFilter, ApiError> {
    let state = match q.state.as_deref() {
        None | Some("all") => None,
        Some("firing") => Some(AlertState::Firing),
        Some("resolved") => Some(AlertState::Resolved),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "'state' = '{other}' is not a state; use firing, resolved or all"
            )));
        }
    };
    let ms = "a time in ms since epoch";
    let from_ms = q.from.as_deref().map(|v| whole::<u64>("from", v, ms)).transpose()?;
    let to_ms = q.to.as_deref().map(|v| whole::<u64>("to", v, ms)).transpose()?;
    if let (Some(from), Some(to)) = (from_ms, to_ms)
        && from > to
    {
        return Err(ApiError::bad_request(format!("'from' ({from}) must not be after 'to' ({to})")));
    }
    let gpu_index = q.gpu.as_deref().map(|v| whole::<u32>("gpu", v, "a GPU index (a whole number)")).transpose()?;
    let rule = q.rule.as_deref().map(parse_rule).transpose().map_err(ApiError::bad_request)?;
    let limit = match q.limit.as_deref() {
        None => 200,
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if (1..=1000).contains(&n) => n,
            _ => return Err(ApiError::bad_request(format!("'limit' = '{v}' must be a whole number from 1 to 1000"))),
        },
    };
    Ok(AlertFilter { state, from_ms, to_ms, gpu_index, rule, limit })
}

/// `GET /api/alerts?state=firing|resolved|all&from=MS&to=MS&gpu=INDEX&rule=NAME&limit=N`.
pub async fn list(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<AlertsResponse>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(format!("{}; {ACCEPTED}", e.body_text())))?;
    let filter = filter(&q)?;
    let mut alerts = blocking(state.alerts.clone(), move |a| a.list(filter)).await?;
    let now = now_ms();
    let mut silences = state.alerts.silences(now);
    let mut webhooks = state.alerts.webhooks();
    let mut reload_error = state.alerts.reload_error();
    if visibility(&state, caller.as_deref()) == Visibility::Redacted {
        alerts.iter_mut().for_each(shared::alerts::Alert::redact);
        for s in &mut silences {
            Silence::SOMEONE.clone_into(&mut s.by);
        }
        // Receivers are internal addresses, and a refused file's message may quote a webhook URL
        // (with its token): signed-in viewers only.
        webhooks.clear();
        reload_error =
            reload_error.map(|_| "the alerts file was refused at the last reload; sign in to see why".into());
    }
    Ok(Json(AlertsResponse {
        alerts,
        firing: state.alerts.firing_count(),
        counts: state.alerts.counts(),
        silences,
        webhooks,
        rules: state.alerts.rules(),
        reload_error,
    }))
}

/// `POST /api/alerts/silences` `{"rule":"temperature","gpu":0,"duration":"2h","reason":"..."}` → 201.
pub async fn silence(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, ApiError> {
    caller.require(&state, Role::Operator, Action::AlertSilence, "alerts")?;
    let request: SilenceRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid silence ({e}); send {{\"rule\":\"temperature\",\"gpu\":0,\"duration\":\"2h\",\"reason\":\"fan being replaced\"}}"
        ))
    })?;
    let target = format!("GPU {} {}", request.gpu, request.rule.as_str());
    let duration_ms = humantime::parse_duration(request.duration.trim())
        .ok()
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let reason = request.validate(duration_ms, caller.identity.role).map_err(|e| match e {
        SilenceInvalid::FaultTooLong { .. } => {
            let message = e.to_string();
            caller.audit(&state, Action::AlertSilence, &target, Outcome::Denied, &message);
            ApiError { status: StatusCode::FORBIDDEN, message }
        }
        _ => ApiError::bad_request(e.to_string()),
    })?;
    let duration_ms = duration_ms.unwrap_or_default();
    let Some(gpu) = state.telemetry.devices().iter().find(|d| d.index == request.gpu) else {
        return Err(ApiError::not_found(format!(
            "no GPU {}; this host has {} GPUs, numbered from 0",
            request.gpu,
            state.telemetry.devices().len()
        )));
    };
    let now = now_ms();
    let silence = Silence {
        id: 0,
        rule: request.rule,
        gpu_uuid: gpu.uuid.clone(),
        by: caller.identity.user.clone(),
        reason,
        from_ms: now,
        until_ms: now.saturating_add(duration_ms),
    };
    let detail = format!("for {}: {}", request.duration.trim(), silence.reason);
    match blocking(state.alerts.clone(), move |a| a.silence(silence)).await? {
        Ok(stored) => {
            caller.audit(&state, Action::AlertSilence, &target, Outcome::Ok, &detail);
            Ok((StatusCode::CREATED, Json(stored)).into_response())
        }
        Err(refused) => {
            caller.audit(&state, Action::AlertSilence, &target, Outcome::Failed, &refused.to_string());
            Err(refused.into())
        }
    }
}

fn id(text: &str, what: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| ApiError::bad_request(format!("'{text}' is not a {what} id; use a whole number")))
}

/// `DELETE /api/alerts/silences/{id}` → 204: its author or an admin.
pub async fn unsilence(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(text): Path<String>,
) -> Result<StatusCode, ApiError> {
    let target = format!("silence {text}");
    caller.require(&state, Role::Operator, Action::AlertUnsilence, &target)?;
    let id = id(&text, "silence")?;
    let by = caller.identity.user.clone();
    let admin = caller.identity.role >= Role::Admin;
    match blocking(state.alerts.clone(), move |a| a.unsilence(id, &by, admin)).await? {
        Ok(ended) => {
            let detail = format!("ended {}'s silence of {}", ended.by, ended.rule.as_str());
            caller.audit(&state, Action::AlertUnsilence, &target, Outcome::Ok, &detail);
            Ok(StatusCode::NO_CONTENT)
        }
        Err(refused) => {
            if let SilenceRefused::NotYours { .. } = refused {
                caller.audit(&state, Action::AlertUnsilence, &target, Outcome::Denied, &refused.to_string());
            }
            Err(refused.into())
        }
    }
}

/// Who a subscription belongs to: a signed-in user; with no tokens (a workstation), the OS user
/// gpudash runs as, so "my processes" matches what the process table shows.
fn subscriber(state: &AppState, caller: Option<&Caller>) -> Result<String, ApiError> {
    own_user(state, caller, "subscribe to alerts: subscriptions belong to a user")
}

/// The caller as the owner of their own settings: a signed-in user; with no tokens (a
/// workstation), the OS user gpudash runs as. Refused with "sign in to `why`" for anyone else.
pub(crate) fn own_user(state: &AppState, caller: Option<&Caller>, why: &str) -> Result<String, ApiError> {
    if !state.auth.enabled() {
        return Ok(team::auth::local_user_name().to_owned());
    }
    match caller {
        Some(c) if !c.identity.anonymous => Ok(c.identity.user.clone()),
        _ => Err(ApiError { status: StatusCode::FORBIDDEN, message: format!("sign in to {why}") }),
    }
}

/// `GET /api/alerts/subscriptions`: the caller's own.
pub async fn subscriptions(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
) -> Result<Json<SubscriptionsResponse>, ApiError> {
    let user = subscriber(&state, caller.as_deref())?;
    let who = user.clone();
    let subscriptions = blocking(state.alerts.clone(), move |a| a.subscriptions(&who)).await?;
    Ok(Json(SubscriptionsResponse { user, subscriptions }))
}

/// `POST /api/alerts/subscriptions` `{"kind":"gpu_free","gpu_uuid":"GPU-…"}` → 201.
pub async fn subscribe(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let user = subscriber(&state, caller.as_deref())?;
    let kind: SubscriptionKind = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid subscription ({e}); send {{\"kind\":\"any_gpu_free\"}}, {{\"kind\":\"gpu_free\",\"gpu_uuid\":\"GPU-…\"}}, \
             {{\"kind\":\"my_processes\"}}, {{\"kind\":\"critical\"}} or {{\"kind\":\"everything\"}}"
        ))
    })?;
    if let SubscriptionKind::GpuFree { gpu_uuid } = &kind
        && !state.telemetry.devices().iter().any(|d| &d.uuid == gpu_uuid)
    {
        return Err(ApiError::bad_request(format!(
            "no GPU with UUID '{gpu_uuid}' on this host; /api/devices lists their UUIDs"
        )));
    }
    match blocking(state.alerts.clone(), move |a| a.add_subscription(&user, kind)).await? {
        Ok(subscription) => Ok((StatusCode::CREATED, Json(subscription)).into_response()),
        Err(refused @ (SubscribeRefused::Duplicate | SubscribeRefused::TooMany(_))) => {
            Err(ApiError { status: StatusCode::CONFLICT, message: refused.to_string() })
        }
    }
}

/// `DELETE /api/alerts/subscriptions/{id}` → 204; only one's own.
pub async fn unsubscribe(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    Path(text): Path<String>,
) -> Result<StatusCode, ApiError> {
    let user = subscriber(&state, caller.as_deref())?;
    let id = id(&text, "subscription")?;
    if blocking(state.alerts.clone(), move |a| a.remove_subscription(&user, id)).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("you have no subscription {id}; GET /api/alerts/subscriptions lists yours")))
    }
}
