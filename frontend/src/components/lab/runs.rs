//! `#lab-runs`: the newest runs on every GPU; a click shows one in full.

use leptos::prelude::*;
use shared::lab::RunSummary;

use super::{status_class, status_label};
use crate::{components::format, hooks::lab::Lab};

#[component]
pub fn RecentRuns() -> impl IntoView {
    let lab = expect_context::<Lab>();
    let runs = Memo::new(move |_| lab.state.with(|s| s.recent.clone()));
    view! {
        <section id="lab-runs" class="lab-panel" aria-label="Recent runs">
            <h3 class="lab-panel-title">"Recent runs"</h3>
            <p class="times-zone runs-zone">{format::zone_caption()}</p>
            <Show
                when=move || runs.with(|r| !r.is_empty())
                fallback=|| view! { <p class="lab-empty">"No runs yet."</p> }
            >
                <div class="table-scroll">
                    <table class="runs-table">
                        <thead>
                            <tr>
                                <th>"Run"</th>
                                <th>"Experiment"</th>
                                <th>"GPU"</th>
                                <th>"State"</th>
                                <th>"Checks"</th>
                                <th>"Who"</th>
                                <th>"When"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {move || runs.get().into_iter().map(|run| view! { <RunRow run=run /> }).collect_view()}
                        </tbody>
                    </table>
                </div>
            </Show>
        </section>
    }
}

#[component]
fn RunRow(run: RunSummary) -> impl IntoView {
    let lab = expect_context::<Lab>();
    let id = run.id;
    let selected = move || lab.selected.get() == Some(id);
    let checks = match run.passed {
        Some(true) => "pass",
        Some(false) => "fail",
        None => "",
    };
    view! {
        <tr class="recent-run" class:selected=selected data-run=id on:click=move |_| lab.selected.set(Some(id))>
            <td>
                <button type="button" class="link-button view-run">{format!("#{id}")}</button>
            </td>
            <td>
                {run.kind.name().to_owned()}
                {run.simulated.then(|| view! { <span class="badge badge-simulated">"SIMULATED"</span> })}
            </td>
            <td class="recent-gpus">{format::indexes(&run.gpus())}</td>
            <td>
                <span class=status_class(run.status)>{status_label(run.status)}</span>
            </td>
            <td class=format!("run-checks {checks}")>{checks}</td>
            <td>{run.requested_by}</td>
            <td>{format::stamp(run.submitted_ms as f64)}</td>
        </tr>
    }
}
