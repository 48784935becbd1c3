//! `#lab-queue`: the running runs and the next ones to start, as every viewer
//! sees them ("… and K more" beyond those the status lists), with progress and
//! a Cancel button for those the caller may cancel.

use leptos::{prelude::*, task::spawn_local};
use shared::lab::{QueueEntry, RunStatus};

use super::{status_class, status_label};
use crate::{
    components::format::{self, indexes},
    hooks::{lab::Lab, session::Session},
};

#[component]
pub fn LabQueue() -> impl IntoView {
    let lab = expect_context::<Lab>();
    // Without progress, so the rows are rebuilt only when runs come, go or move; progress updates each row in place.
    let entries = Memo::new(move |_| {
        lab.state.with(|s| s.queue().iter().map(|e| QueueEntry { progress: None, ..e.clone() }).collect::<Vec<_>>())
    });
    let unlisted = Memo::new(move |_| lab.state.with(|s| s.unlisted()));
    let error = RwSignal::new(None::<String>);
    view! {
        <section id="lab-queue" class="lab-panel" aria-label="Queue">
            <h3 class="lab-panel-title">"Queue"</h3>
            <Show when=move || error.with(Option::is_some)>
                <p class="lab-error queue-error" role="alert">{move || error.get().unwrap_or_default()}</p>
            </Show>
            <Show
                when=move || entries.with(|e| !e.is_empty())
                fallback=|| view! { <p class="lab-empty">"Nothing queued or running."</p> }
            >
                <div class="table-scroll">
                    <table class="queue-table">
                        <thead>
                            <tr>
                                <th>"#"</th>
                                <th>"Run"</th>
                                <th>"Experiment"</th>
                                <th>"GPU"</th>
                                <th>"Who"</th>
                                <th>"Since"</th>
                                <th>"Progress"</th>
                                <th></th>
                            </tr>
                        </thead>
                        <tbody>
                            {move || {
                                entries
                                    .get()
                                    .into_iter()
                                    .map(|entry| view! { <QueueRow id=entry.run.id entry=entry error=error /> })
                                    .collect_view()
                            }}
                        </tbody>
                    </table>
                </div>
                <Show when=move || { unlisted.get() > 0 }>
                    <p class="queue-more">
                        {move || format!("… and {} more queued", unlisted.get())}
                        " (" <a href="/api/runs?status=queued" target="_blank">"list them all"</a> ")"
                    </p>
                </Show>
            </Show>
        </section>
    }
}

#[component]
fn QueueRow(id: u64, entry: QueueEntry, error: RwSignal<Option<String>>) -> impl IntoView {
    let lab = expect_context::<Lab>();
    let session = expect_context::<Session>();
    let run = entry.run;
    // Progress moves without re-keying the row.
    let progress = Memo::new(move |_| lab.state.with(|s| s.queue_entry(id).and_then(|e| e.progress.clone())));
    let percent = move || progress.with(|p| p.as_ref().map_or(0.0, |p| (p.fraction * 100.0).clamp(0.0, 100.0)));
    let message = move || progress.with(|p| p.as_ref().map(|p| p.message.clone()).unwrap_or_default());
    let running = run.status == RunStatus::Running;
    let since = match (running, run.started_ms) {
        (true, Some(started)) => format!("running since {}", format::stamp(started as f64)),
        _ => format!("queued at {}", format::stamp(run.submitted_ms as f64)),
    };
    let position = if running { "running".to_owned() } else { format!("{}", entry.position) };
    let gpus = indexes(&run.gpus());
    let requested_by = run.requested_by.clone();
    let may_cancel = move || session.may_cancel(&requested_by);
    let cancelling = RwSignal::new(false);
    let cancel = move |_| {
        cancelling.set(true);
        spawn_local(async move {
            match lab.cancel(id).await {
                Ok(()) => {
                    error.try_set(None);
                }
                Err(failure) => {
                    error.try_set(Some(format!("Run {id}: {}", failure.message)));
                    session.unauthorized(&failure);
                }
            }
            cancelling.try_set(false);
        });
    };
    view! {
        <tr class="queue-entry" data-run=id data-status=status_label(run.status)>
            <td class="queue-position">{position}</td>
            <td class="queue-run">
                <button type="button" class="link-button" on:click=move |_| lab.selected.set(Some(id))>
                    {format!("#{id}")}
                </button>
            </td>
            <td class="queue-kind">
                {run.kind.name().to_owned()} " " <span class=status_class(run.status)>{status_label(run.status)}</span>
            </td>
            <td class="queue-gpu">{gpus}</td>
            <td class="queue-who">{run.requested_by}</td>
            <td class="queue-since">{since}</td>
            <td class="queue-progress">
                <progress max="100" value=move || format!("{:.0}", percent())></progress>
                <span class="progress-percent">{move || format!("{:.0}%", percent())}</span>
                <span class="progress-message">{message}</span>
            </td>
            <td>
                <Show when=may_cancel>
                    <button type="button" class="cancel-run" disabled=move || cancelling.get() on:click=cancel>
                        "Cancel"
                    </button>
                </Show>
            </td>
        </tr>
    }
}
