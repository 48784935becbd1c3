//! `#audit-log`: who did what, newest first, filtered by user, action and
//! outcome (admins only; the server refuses others).

use leptos::{prelude::*, task::spawn_local};
use shared::auth::{AuditEntry, AuditOutcome, AuditQuery};

use crate::{
    components::format,
    hooks::{api::get_json, session::Session},
};

/// Entries the page asks for.
const AUDIT_LIMIT: u32 = 100;

/// The filters as typed on the page.
#[derive(Debug, Clone, Default, PartialEq)]
struct Filters {
    user: String,
    action: String,
    /// "" for any outcome.
    outcome: String,
}

/// `/api/audit?…` for these filters; empty fields filter nothing.
fn audit_url(filters: &Filters) -> String {
    let text = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    let query = AuditQuery {
        limit: Some(AUDIT_LIMIT),
        user: text(&filters.user),
        action: text(&filters.action),
        outcome: AuditOutcome::parse(&filters.outcome),
        ..AuditQuery::default()
    };
    // Serializing plain options and strings cannot fail; the fallback is never used.
    format!("/api/audit?{}", serde_urlencoded::to_string(&query).unwrap_or_default())
}

#[component]
pub fn AuditPage() -> impl IntoView {
    let session = expect_context::<Session>();
    let entries = RwSignal::new(None::<Vec<AuditEntry>>);
    let error = RwSignal::new(None::<String>);
    let filters = RwSignal::new(Filters::default());
    let load = move || {
        let url = filters.with_untracked(audit_url);
        spawn_local(async move {
            match get_json::<Vec<AuditEntry>>(&url).await {
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
    let field =
        move |id: &'static str, label: &'static str, get: fn(&Filters) -> &String, set: fn(&mut Filters, String)| {
            view! {
                <label class="audit-filter">
                    {label}
                    <input
                        id=id
                        type="search"
                        placeholder="any"
                        prop:value=move || filters.with(|f| get(f).clone())
                        on:input=move |ev| filters.update(|f| set(f, event_target_value(&ev)))
                    />
                </label>
            }
        };
    view! {
        <main class="audit-page">
            <div class="section-head">
                <h2 class="section-title">"Audit log"</h2>
                <button id="audit-refresh" type="button" class="small-button" on:click=move |_| load()>
                    "Refresh"
                </button>
            </div>
            <form
                id="audit-filters"
                class="audit-filters"
                on:submit=move |ev| {
                    ev.prevent_default();
                    load();
                }
            >
                {field("audit-filter-user", "User", |f| &f.user, |f, v| f.user = v)}
                {field("audit-filter-action", "Action", |f| &f.action, |f, v| f.action = v)}
                <label class="audit-filter">
                    "Outcome"
                    <select
                        id="audit-filter-outcome"
                        prop:value=move || filters.with(|f| f.outcome.clone())
                        on:change=move |ev| {
                            filters.update(|f| f.outcome = event_target_value(&ev));
                            load();
                        }
                    >
                        <option value="">"any"</option>
                        {AuditOutcome::ALL
                            .into_iter()
                            .map(|o| view! { <option value=o.name()>{o.name()}</option> })
                            .collect_view()}
                    </select>
                </label>
                <button type="submit" class="small-button">"Filter"</button>
            </form>
            <Show when=move || error.with(Option::is_some)>
                <p class="lab-error audit-error" role="alert">{move || error.get().unwrap_or_default()}</p>
            </Show>
            <div class="table-scroll">
                <table id="audit-log">
                    <thead>
                        <tr>
                            <th title=format::zone_caption()>{format!("Time ({})", shared::time::zone_name(format::utc_offset()))}</th>
                            <th>"User"</th>
                            <th>"Client"</th>
                            <th>"What happened"</th>
                            <th>"Target"</th>
                            <th>"Outcome"</th>
                            <th>"Detail"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {move || entries.get().unwrap_or_default().into_iter().map(|e| {
                            let said = if e.summary.is_empty() { e.action.clone() } else { format::server_text(&e.summary) };
                            view! {
                            <tr class="audit-entry" data-id=e.id>
                                <td class="audit-time">{format::stamp(e.timestamp_ms as f64)}</td>
                                <td class="audit-user">{e.user}</td>
                                <td class="mono">{e.client}</td>
                                <td class="audit-action" data-action=e.action.clone() title=e.action.clone()>
                                    {said}
                                </td>
                                <td>{e.target}</td>
                                <td class=format!("audit-outcome outcome-{}", e.outcome.name())>{e.outcome.name()}</td>
                                <td class="audit-detail">{format::server_text(&e.detail)}</td>
                            </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
        </main>
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_url_carries_only_the_filters_typed_and_encodes_them() {
        assert_eq!(audit_url(&Filters::default()), "/api/audit?limit=100");
        let filters = Filters { user: " ana b ".into(), action: "a&b=c".into(), outcome: "denied".into() };
        let url = audit_url(&filters);
        assert_eq!(url, "/api/audit?limit=100&user=ana+b&action=a%26b%3Dc&outcome=denied");
        let back: AuditQuery = serde_urlencoded::from_str(url.trim_start_matches("/api/audit?")).unwrap();
        assert_eq!(back.user.as_deref(), Some("ana b"));
        assert_eq!(back.outcome, Some(AuditOutcome::Denied));
    }
}
