//! `#login-required`: what the page shows instead of the dashboard when viewing needs a token.

use leptos::prelude::*;

use crate::components::login::LoginForm;

#[component]
pub fn LoginRequired() -> impl IntoView {
    view! {
        <main id="login-required" class="login-page">
            <h2>"Log in to gpudash"</h2>
            <p class="login-explain">
                "This dashboard is shared: viewing it needs you to sign in, with your team's identity provider where "
                "it offers one, or with the gpudash token its administrator gave you."
            </p>
            <LoginForm />
        </main>
    }
}
