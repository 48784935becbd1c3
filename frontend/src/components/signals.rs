//! Stop and Kill in the process table (`--allow-signals`): the buttons a caller may use
//! ([`shared::processes::may_signal`], the server's own rule), the SIGKILL confirmation, and
//! whether the process went away.

use leptos::{prelude::*, task::spawn_local};
use shared::processes::{GpuProcess, Signal, SignalAnswer, shorten};

use crate::hooks::{api::post_json, session::Session};

/// Command lines in the SIGKILL question are cut to this many characters.
const QUESTION_CHARS: usize = 60;

/// One process table's signalling state: kept by the table, so a row redrawn by the next
/// sample loses neither the question nor the answer.
#[derive(Debug, Clone, Copy)]
pub struct SignalControl {
    session: Session,
    /// The process a SIGKILL waits for confirmation on.
    confirming: RwSignal<Option<GpuProcess>>,
    /// What the last signal did (or why it was refused), and whether that was a failure.
    outcome: RwSignal<Option<(String, bool)>>,
    working: RwSignal<bool>,
}

impl SignalControl {
    /// `None` where the server has signals off (or has not said who the page is yet).
    pub fn for_table() -> Option<Self> {
        let session = use_context::<Session>()?;
        Some(Self {
            session,
            confirming: RwSignal::new(None),
            outcome: RwSignal::new(None),
            working: RwSignal::new(false),
        })
    }

    /// The server runs with `--allow-signals`.
    pub fn enabled(self) -> bool {
        self.session.me.with(|me| me.as_ref().is_some_and(|me| me.signals))
    }

    fn send(self, process: &GpuProcess, signal: Signal) {
        let pid = process.pid;
        let what = format!("PID {pid} ({})", describe(process));
        self.confirming.set(None);
        self.working.set(true);
        spawn_local(async move {
            let body = serde_json::json!({ "signal": signal.name() });
            let answer = post_json::<SignalAnswer>(&format!("/api/processes/{pid}/signal"), Some(&body)).await;
            let outcome = match answer {
                Ok(answer) => {
                    let after = if answer.exited { "exited" } else { "still running" };
                    (format!("{} sent to {what}: {after}", signal.name()), false)
                }
                Err(failure) => {
                    self.session.unauthorized(&failure);
                    (format!("{} to {what}: {}", signal.name(), failure.message), true)
                }
            };
            self.outcome.try_set(Some(outcome));
            self.working.try_set(false);
        });
    }
}

/// "python train.py, ana": what the confirmation names.
fn describe(process: &GpuProcess) -> String {
    let command = process.command.as_deref().or(process.name.as_deref()).unwrap_or("?");
    format!("{}, {}", shorten(command, QUESTION_CHARS), process.user_name())
}

/// `td.actions`: Stop (SIGTERM at once) and Kill (SIGKILL after a confirmation), where the caller may.
#[component]
pub fn SignalButtons(control: SignalControl, process: GpuProcess) -> impl IntoView {
    if !control.session.may_signal(&process) {
        return view! { <td class="actions"></td> }.into_any();
    }
    let pid = process.pid;
    let term = process.clone();
    view! {
        <td class="actions">
            <button
                type="button"
                class="small-button signal-term"
                data-pid=pid
                title=format!("Send SIGTERM to PID {pid}: ask it to end")
                disabled=move || control.working.get()
                on:click=move |_| control.send(&term, Signal::Term)
            >
                "Stop"
            </button>
            " "
            <button
                type="button"
                class="small-button signal-kill"
                data-pid=pid
                title=format!("Send SIGKILL to PID {pid}: end it at once (asks first)")
                disabled=move || control.working.get()
                on:click=move |_| control.confirming.set(Some(process.clone()))
            >
                "Kill"
            </button>
        </td>
    }
    .into_any()
}

/// `.signal-confirm` (the SIGKILL question) and `.signal-outcome` under a process table.
#[component]
pub fn SignalPanel(control: SignalControl) -> impl IntoView {
    let question = move || {
        control.confirming.get().map(|process| {
            let text = format!("Send SIGKILL to PID {} ({})?", process.pid, describe(&process));
            let pid = process.pid;
            view! {
                <div class="signal-confirm" role="alertdialog" data-pid=pid>
                    <span class="signal-question">{text}</span>
                    " "
                    <button type="button" class="small-button signal-confirm-kill" on:click=move |_| control.send(&process, Signal::Kill)>
                        "Send SIGKILL"
                    </button>
                    " "
                    <button type="button" class="small-button signal-cancel" on:click=move |_| control.confirming.set(None)>
                        "Cancel"
                    </button>
                </div>
            }
        })
    };
    let outcome = move || {
        control.outcome.get().map(|(text, failed)| {
            view! { <p class="signal-outcome" class:signal-error=failed role="status">{text}</p> }
        })
    };
    view! {
        {question}
        {outcome}
    }
}
