//! `use_session()`: who the page talks as (`GET /api/me`), logging in and out,
//! and what the caller's role lets the page offer.

use std::time::Duration;

use leptos::{logging, prelude::*, task::spawn_local};
use shared::auth::{LoggedOut, Me, Role};

use super::api::{ApiFailure, get_json, post_json, post_maybe_json};

/// Wait before asking `/api/me` again when the server did not answer.
const ME_RETRY: Duration = Duration::from_secs(2);

/// The caller as the page knows it.
#[derive(Debug, Clone, Copy)]
pub struct Session {
    /// `None` until `/api/me` first answered.
    pub me: ReadSignal<Option<Me>>,
    set_me: WriteSignal<Option<Me>>,
    /// Changes at every login and logout: the socket reconnects and lab state reloads with the new identity.
    pub epoch: ReadSignal<u32>,
    set_epoch: WriteSignal<u32>,
}

impl Session {
    /// `Some(true)` when the caller may see the dashboard, `Some(false)` when it needs a token; `None` while unknown.
    pub fn can_view(self) -> Option<bool> {
        self.me.with(|me| me.as_ref().map(|me| me.user.is_some()))
    }

    /// True when the caller's role is at least `role` (what they may see: the audit log for admins).
    pub fn has(self, role: Role) -> bool {
        self.me.with(|me| me.as_ref().is_some_and(|me| me.has(role)))
    }

    /// True when the caller may change what needs `role` ([`Me::may_change`]: never under `--read-only`).
    pub fn may_change(self, role: Role) -> bool {
        self.me.with(|me| may_change(me.as_ref(), role))
    }

    /// The server was started with `--read-only`: the page offers no action and says why.
    pub fn read_only(self) -> bool {
        self.me.with(|me| me.as_ref().is_some_and(|me| me.read_only))
    }

    /// True when the caller may cancel a run asked for by `requested_by`.
    pub fn may_cancel(self, requested_by: &str) -> bool {
        self.me.with(|me| may_cancel(me.as_ref(), requested_by))
    }

    /// True when the server has `--allow-signals` and the caller may signal `process` (the server's rule).
    pub fn may_signal(self, process: &shared::processes::GpuProcess) -> bool {
        self.me.with(|me| may_signal(me.as_ref(), process))
    }

    /// Trades a token for a session cookie; on success the page reloads its state as the new user.
    /// A failure carries the server's message (a 401: the token is not known).
    pub async fn login(self, token: String) -> Result<(), ApiFailure> {
        let body = serde_json::json!({ "token": token });
        let me = post_json::<Me>("/api/login", Some(&body)).await?;
        self.set_me.set(Some(me));
        self.set_epoch.update(|e| *e += 1);
        Ok(())
    }

    /// Ends the session and asks the server who the page is now.
    pub fn logout(self) {
        spawn_local(async move {
            match post_maybe_json::<LoggedOut>("/api/logout").await {
                // Signed in by the OIDC provider: its own sign-out next, which comes back here.
                Ok(Some(LoggedOut { sign_out: Some(url) })) => {
                    let _ = window().location().set_href(&url);
                    return;
                }
                Ok(_) => {}
                Err(failure) => logging::warn!("gpudash: logout: {}", failure.message),
            }
            self.reload().await;
            self.set_epoch.update(|e| *e += 1);
        });
    }

    /// A call was answered 401: the session is gone (or viewing needs a token); ask who we are now.
    pub fn unauthorized(self, failure: &ApiFailure) {
        if failure.is_unauthorized() {
            spawn_local(async move { self.reload().await });
        }
    }

    async fn reload(self) {
        loop {
            match get_json::<Me>("/api/me").await {
                Ok(me) => {
                    self.set_me.set(Some(me));
                    return;
                }
                Err(failure) => {
                    logging::warn!("gpudash: /api/me: {}", failure.message);
                    sleep(ME_RETRY).await;
                }
            }
        }
    }
}

/// Asks `/api/me` now (and again until the server answers).
pub fn use_session() -> Session {
    let (me, set_me) = signal(None::<Me>);
    let (epoch, set_epoch) = signal(0u32);
    let session = Session { me, set_me, epoch, set_epoch };
    spawn_local(async move { session.reload().await });
    session
}

fn may_change(me: Option<&Me>, role: Role) -> bool {
    me.is_some_and(|me| me.may_change(role))
}

/// Operators cancel their own runs, admins anyone's (the server decides too).
fn may_cancel(me: Option<&Me>, requested_by: &str) -> bool {
    may_change(me, Role::Admin)
        || (may_change(me, Role::Operator) && me.and_then(|me| me.user.as_deref()) == Some(requested_by))
}

/// [`shared::processes::may_signal`] for the page's caller, where signals are on.
fn may_signal(me: Option<&Me>, process: &shared::processes::GpuProcess) -> bool {
    let Some(me) = me.filter(|me| me.signals && !me.read_only) else { return false };
    let (Some(role), Some(user)) = (me.role, me.user.as_deref()) else { return false };
    shared::processes::may_signal(role, user, user, process).is_ok()
}

/// Resolves after `delay`, on the browser's timer.
pub async fn sleep(delay: Duration) {
    let mut resolve = None;
    let promise = js_sys::Promise::new(&mut |done, _| resolve = Some(done));
    if let Some(done) = resolve {
        set_timeout(move || drop(done.call0(&wasm_bindgen::JsValue::NULL)), delay);
    }
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me(user: &str, role: Role) -> Me {
        Me {
            user: Some(user.to_owned()),
            role: Some(role),
            anonymous: false,
            auth_enabled: true,
            exposed_without_auth: false,
            signals: false,
            read_only: false,
            by_proxy: false,
            sign_out: None,
            sign_in: None,
        }
    }

    #[test]
    fn roles_decide_what_the_page_offers() {
        let omar = me("omar", Role::Operator);
        assert!(may_change(Some(&omar), Role::Operator));
        assert!(!may_change(Some(&omar), Role::Admin));
        assert!(may_cancel(Some(&omar), "omar"));
        assert!(!may_cancel(Some(&omar), "olga"));
        assert!(may_cancel(Some(&me("ada", Role::Admin)), "olga"));
        assert!(!may_cancel(Some(&me("vera", Role::Viewer)), "vera"));
        let locked_out = Me { user: None, role: None, ..omar };
        assert!(!may_change(Some(&locked_out), Role::Viewer));
        assert!(!may_change(None, Role::Viewer));
    }

    #[test]
    fn read_only_offers_no_change_to_any_role() {
        // The server also turns `signals` off under --read-only; the page's rule holds even if it did not.
        let read_only = |me: Me| Me { read_only: true, signals: true, ..me };
        let ada = read_only(me("ada", Role::Admin));
        assert!(!may_change(Some(&ada), Role::Operator) && !may_change(Some(&ada), Role::Admin));
        assert!(ada.has(Role::Admin), "an admin still sees the audit log");
        assert!(!may_cancel(Some(&ada), "olga") && !may_cancel(Some(&read_only(me("omar", Role::Operator))), "omar"));
        let process = shared::processes::GpuProcess { user: Some("olga".to_owned()), ..shared::testing::process(0, 9) };
        assert!(!may_signal(Some(&ada), &process));
        assert!(may_signal(Some(&Me { read_only: false, ..ada }), &process), "the fault this catches");
    }

    #[test]
    fn signal_buttons_follow_the_flag_and_the_shared_rule() {
        let process = |user: &str| shared::processes::GpuProcess {
            user: Some(user.to_owned()),
            ..shared::testing::process(0, 9)
        };
        let on = |me: Me| Me { signals: true, ..me };
        assert!(may_signal(Some(&on(me("omar", Role::Operator))), &process("omar")));
        assert!(!may_signal(Some(&on(me("omar", Role::Operator))), &process("olga")));
        assert!(may_signal(Some(&on(me("ada", Role::Admin))), &process("olga")));
        assert!(!may_signal(Some(&on(me("vera", Role::Viewer))), &process("vera")));
        assert!(!may_signal(Some(&me("ada", Role::Admin)), &process("olga")), "signals are off");
    }
}
