//! `POST /api/processes/{pid}/signal`: SIGTERM or SIGKILL to a GPU process, behind `--allow-signals`,
//! for whom [`shared::processes::may_signal`] allows; every attempt is audited.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use shared::auth::Role;
use shared::processes::{GpuProcess, Signal, SignalAnswer, SignalRequest, may_signal, shorten};

use super::auth::Caller;
use super::error::blocking;
use super::{ApiError, AppState};
use team::audit::{Action, Outcome};
use team::signals::{self, SignalError};
use telemetry::procfs::ProcReader;

/// Command lines in the audit log are cut to this many characters.
const AUDIT_COMMAND_CHARS: usize = 80;

impl From<SignalError> for ApiError {
    fn from(e: SignalError) -> Self {
        let status = match e {
            SignalError::NotAPid(_) | SignalError::PidZero | SignalError::PidTooBig(_) => StatusCode::BAD_REQUEST,
            SignalError::Off | SignalError::Init | SignalError::Itself(_) | SignalError::Denied { .. } => {
                StatusCode::FORBIDDEN
            }
            SignalError::NotGpu(_) => StatusCode::NOT_FOUND,
            SignalError::StartUnknown(_) | SignalError::Reused { .. } => StatusCode::CONFLICT,
            SignalError::Gone(_) => StatusCode::GONE,
            SignalError::Failed { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError { status, message: e.to_string() }
    }
}

/// The audit log's name for a process: "PID 4242 (ana: python train.py --bs 32)".
fn describe(pid: u32, process: Option<&GpuProcess>) -> String {
    let Some(p) = process else { return format!("PID {pid}") };
    let user = p.user.as_deref().unwrap_or("unknown user");
    let command = p.command.as_deref().or(p.name.as_deref()).unwrap_or("unknown command");
    format!("PID {pid} ({user}: {})", shorten(command, AUDIT_COMMAND_CHARS))
}

/// `POST /api/processes/{pid}/signal` `{"signal": "SIGTERM" | "SIGKILL"}`.
pub async fn signal(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(pid): Path<String>,
    body: Bytes,
) -> Result<Json<SignalAnswer>, ApiError> {
    let refuse = |target: &str, what: &str, e: ApiError| {
        caller.audit(&state, Action::ProcessSignal, target, Outcome::Denied, &format!("{what} refused: {e}"));
        e
    };
    let path_target = format!("PID {}", shorten(&pid, 20));
    if !state.allow_signals {
        return Err(refuse(&path_target, "signal", SignalError::Off.into()));
    }
    caller.require(&state, Role::Operator, Action::ProcessSignal, &path_target)?;
    let pid = signals::parse_pid(&pid).map_err(|e| refuse(&path_target, "signal", e.into()))?;
    let signal = parse_body(&body).map_err(|e| refuse(&path_target, "signal", e))?;
    let name = signal.name();
    let processes = state.telemetry.details().processes;
    let process = signals::target(pid, &processes).map_err(|e| refuse(&path_target, name, e.into()))?;
    let target = describe(pid, Some(&process));
    let who = if caller.identity.anonymous {
        "an anonymous visitor".to_owned()
    } else {
        format!("'{}'", caller.identity.user)
    };
    may_signal(caller.identity.role, &caller.identity.user, &who, &process)
        .map_err(|e| refuse(&target, name, ApiError { status: StatusCode::FORBIDDEN, message: e.to_string() }))?;
    // The send's own refusals are audited below, each as what it is: the helper hands them back whole.
    let sent = blocking(ProcReader::new("/proc"), move |proc| Ok::<_, ApiError>(signals::send(proc, &process, signal)))
        .await?;
    match sent {
        Ok(exited) => {
            // Its job ends as stopped through gpudash, when the process went.
            if exited {
                state.jobs.mark(pid, shared::jobs::Outcome::Killed, state.clock.now_ms());
            }
            let after = if exited { "exited" } else { "still running" };
            caller.audit(&state, Action::ProcessSignal, &target, Outcome::Ok, &format!("{name} sent; {after}"));
            tracing::info!("{} sent {name} to {target}; {after}", caller.identity.user);
            Ok(Json(SignalAnswer { pid, signal, sent: true, exited }))
        }
        Err(e @ (SignalError::Failed { .. } | SignalError::Gone(_))) => {
            caller.audit(&state, Action::ProcessSignal, &target, Outcome::Failed, &format!("{name} failed: {e}"));
            Err(e.into())
        }
        Err(e) => Err(refuse(&target, name, e.into())),
    }
}

/// The body's signal, or a 400 that names the two allowed.
fn parse_body(body: &[u8]) -> Result<Signal, ApiError> {
    let request: SignalRequest = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid signal request ({e}); send {{\"signal\": \"SIGTERM\"}} or {{\"signal\": \"SIGKILL\"}}"
        ))
    })?;
    Signal::parse(&request.signal).map_err(|e| ApiError::bad_request(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_name_the_two_signals_when_wrong() {
        assert_eq!(parse_body(br#"{"signal":"SIGKILL"}"#).ok(), Some(Signal::Kill));
        for bad in [&b""[..], b"{}", br#"{"signal":"SIGHUP"}"#, br#"{"signal":9}"#, br#"{"signal":"SIGTERM","x":1}"#] {
            let e = parse_body(bad).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            assert!(e.message.contains("SIGTERM") && e.message.contains("SIGKILL"), "{}", e.message);
        }
    }
}
