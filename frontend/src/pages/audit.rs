//! `#audit-log`: who did what, newest first (admins only; the server refuses others).

use leptos::{prelude::*, task::spawn_local};
use shared::auth::AuditEntry;

use crate::{
    components::format,
    hooks::{api::get_json, session::Session},
};

/// Entries the page asks for.
const AUDIT_LIMIT: u32 = 100;

#[component]
pub fn AuditPage() -> impl IntoView {
    let session = expect_context::<Session>();
    let entries = RwSignal::new(None::<Vec<AuditEntry>>);
    let error = RwSignal::new(None::<String>);
    let load = move || {
        spawn_local(async move {
            match get_json::<Vec<AuditEntry>>(&format!("/api/audit?limit={AUDIT_LIMIT}")).await {
                Ok(list) => {
                    entries.try_set(Some(list));
                    error.try_set(None);
                }
                Err(failure) => {
                    error.try_set(Some(failure.message.clone()));
                    session.unauthorized(&failure);
                }
            }
        });
    };
    load();
    view! {
        <main class="audit-page">
            <div class="section-head">
                <h2 class="section-title">"Audit log"</h2>
                <button id="audit-refresh" type="button" class="small-button" on:click=move |_| load()>
                    "Refresh"
                </button>
            </div>
            <Show when=move || error.with(Option::is_some)>
                <p class="lab-error audit-error" role="alert">{move || error.get().unwrap_or_default()}</p>
            </Show>
            <div class="table-scroll">
                <table id="audit-log">
                    <thead>
                        <tr>
                            <th>"Time"</th>
                            <th>"User"</th>
                            <th>"Client"</th>
                            <th>"Action"</th>
                            <th>"Target"</th>
                            <th>"Outcome"</th>
                            <th>"Detail"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {move || entries.get().unwrap_or_default().into_iter().map(|e| view! {
                            <tr class="audit-entry" data-id=e.id>
                                <td>{format::day_and_time(e.timestamp_ms as f64)}</td>
                                <td class="audit-user">{e.user}</td>
                                <td class="mono">{e.client}</td>
                                <td class="audit-action">{e.action}</td>
                                <td>{e.target}</td>
                                <td class=format!("audit-outcome outcome-{}", e.outcome)>{e.outcome.clone()}</td>
                                <td class="audit-detail">{e.detail}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
        </main>
    }
}
