//! `#login-form`: trades a token for a session cookie; `#sso-login` signs in with the team's identity provider.

use leptos::{ev, prelude::*, task::spawn_local};

use crate::hooks::session::Session;

/// The token field and its Log in button; `on_done` runs after a successful login.
#[component]
pub fn LoginForm(#[prop(optional)] on_done: Option<Callback<()>>) -> impl IntoView {
    let session = expect_context::<Session>();
    let token = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let submit = move |ev: ev::SubmitEvent| {
        ev.prevent_default();
        let entered = token.get_untracked().trim().to_owned();
        if entered.is_empty() {
            error.set(Some("Enter your gpudash token.".into()));
            return;
        }
        busy.set(true);
        spawn_local(async move {
            match session.login(entered).await {
                Ok(()) => {
                    token.try_set(String::new());
                    error.try_set(None);
                    if let Some(done) = on_done {
                        done.run(());
                    }
                }
                Err(failure) => drop(error.try_set(Some(failure.message))),
            }
            busy.try_set(false);
        });
    };
    // The team's identity provider, where the server signs people in with one (`--oidc-issuer`).
    let provider = move || session.me.with(|m| m.as_ref().and_then(|m| m.sign_in.clone()));
    view! {
        {move || provider().map(|with| view! {
            <p class="login-sso">
                <a id="sso-login" class="primary-button" href=with.url rel="external">
                    {format!("Sign in with {}", with.provider)}
                </a>
                <span class="login-or">"or with a token:"</span>
            </p>
        })}
        <form id="login-form" class="login-form" on:submit=submit>
            <label class="field-label" for="login-token">"Token"</label>
            <input
                id="login-token"
                type="password"
                autocomplete="current-password"
                placeholder="your gpudash token"
                bind:value=token
            />
            <button type="submit" class="primary-button" disabled=move || busy.get()>"Log in"</button>
            <Show when=move || error.with(Option::is_some)>
                <p class="login-error" role="alert">{move || error.get().unwrap_or_default()}</p>
            </Show>
        </form>
    }
}
