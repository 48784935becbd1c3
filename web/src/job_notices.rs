//! `GET`/`PUT /api/jobs/notices`: the caller's own end-of-job notices and digest, on or off, and
//! what the server sends; `POST /api/jobs/digest`: an admin sends every owner the digest of the
//! period that ends now (`team::jobs::notify`).

use axum::body::Bytes;
use axum::extract::State;
use axum::{Extension, Json};
use shared::auth::Role;
use shared::jobs::notices::{DigestSent, NoticeChange, NoticeSettings};
use team::audit::{Action, Outcome};

use super::alerts::own_user;
use super::auth::Caller;
use super::error::blocking;
use super::{ApiError, AppState};

const WHY: &str = "see or change your job notices: they belong to the owner of the jobs";

/// `GET /api/jobs/notices`.
pub async fn get(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
) -> Result<Json<NoticeSettings>, ApiError> {
    let owner = own_user(&state, caller.as_deref(), WHY)?;
    Ok(Json(blocking(state.notices.clone(), move |n| n.settings(&owner)).await?))
}

/// `PUT /api/jobs/notices` `{"notices": false}` or `{"digest": true}` (or both).
pub async fn put(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Json<NoticeSettings>, ApiError> {
    let owner = own_user(&state, Some(&caller), WHY)?;
    caller.require(&state, Role::Viewer, Action::JobNotices, &owner)?;
    let change: NoticeChange = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid choice ({e}); send {{\"notices\": true|false, \"digest\": true|false}}, either or both"
        ))
    })?;
    if change == NoticeChange::default() {
        return Err(ApiError::bad_request(
            "nothing to change; send {\"notices\": true|false, \"digest\": true|false}, either or both".to_owned(),
        ));
    }
    let who = owner.clone();
    let settings = blocking(state.notices.clone(), move |n| n.choose(&who, change, telemetry::now_ms())).await?;
    let detail = format!("notices {}, digest {}", on(settings.choice.notices), on(settings.choice.digest));
    caller.audit(&state, Action::JobNotices, &owner, Outcome::Ok, &detail);
    Ok(Json(settings))
}

/// `POST /api/jobs/digest` (admins): the digests of the period that ends now, sent now.
pub async fn digest(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Json<DigestSent>, ApiError> {
    caller.require(&state, Role::Admin, Action::JobDigest, "job digests")?;
    if !body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("POST /api/jobs/digest takes no body".to_owned()));
    }
    let sent = state.notices.digest_now(telemetry::now_ms()).await?;
    let detail = format!("{} owner(s), {} message(s)", sent.owners.len(), sent.messages);
    caller.audit(&state, Action::JobDigest, "job digests", Outcome::Ok, &detail);
    Ok(Json(sent))
}

fn on(yes: bool) -> &'static str {
    if yes { "on" } else { "off" }
}
