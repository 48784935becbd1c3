//! Notices above the cards: the simulator banner, the "no GPUs" explanation,
//! and the warning that anyone on the network may use the dashboard.

use leptos::prelude::*;

/// `#simulated-banner`: says plainly that no figure on the page is real.
#[component]
pub fn SimulatedBanner() -> impl IntoView {
    view! {
        <div id="simulated-banner" class="notice notice-warn" role="status">
            <strong>"Simulated GPUs"</strong>
            " — figures come from gpudash's simulator, not hardware."
        </div>
    }
}

/// `#no-gpus`: why there is nothing to show, in the words of the driver, and what to try.
#[component]
pub fn NoGpus(gpu_error: Option<String>) -> impl IntoView {
    view! {
        <section id="no-gpus" class="notice notice-empty">
            <h2>"No GPUs to show"</h2>
            {gpu_error.map(|error| view! { <pre class="gpu-error">{error}</pre> })}
            <p>
                "To see the dashboard without NVIDIA hardware, start the simulator: "
                <code>"gpudash --simulate 4"</code>
            </p>
        </section>
    }
}

/// `#anonymous-banner`: the server listens beyond this machine and lets anyone do anything.
#[component]
pub fn AnonymousBanner() -> impl IntoView {
    view! {
        <div id="anonymous-banner" class="notice notice-danger" role="alert">
            "This dashboard is open to anyone on the network: no tokens are configured (--allow-anonymous)."
        </div>
    }
}
