//! Stop and Kill (`--allow-signals`), in the process table and on an idle process's alert card:
//! the buttons a caller may use ([`shared::processes::may_signal`], the server's own rule), the
//! confirmation both ask for (naming the process, its owner, running time and memory), and
//! whether the process went away.

use leptos::{prelude::*, task::spawn_local};
use shared::processes::{GpuProcess, Signal, SignalAnswer, shorten};
use shared::units::format_bytes;

use crate::components::format;
use crate::hooks::{api::post_json, session::Session};

/// Command lines in the question are cut to this many characters.
const QUESTION_CHARS: usize = 60;

/// One view's signalling state (the process table's, the Alerts tab's): kept by the view, so a
/// row or card redrawn by the next sample loses neither the question nor the answer.
#[derive(Debug, Clone, Copy)]
pub struct SignalControl {
    session: Session,
    /// The process and signal waiting for confirmation, with the question that names them.
    confirming: RwSignal<Option<(GpuProcess, Signal, String)>>,
    /// What the last signal did (or why it was refused): for which PID, the words, and whether that was a failure.
    outcome: RwSignal<Option<(u32, String, bool)>>,
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

    /// The caller may signal `process` (signals on, and the server's rule allows it).
    pub fn may_signal(self, process: &GpuProcess) -> bool {
        self.session.may_signal(process)
    }

    /// Asks whether to send `signal` to `process`; nothing is sent until the answer is yes.
    pub fn ask(self, process: GpuProcess, signal: Signal) {
        let text = question(&process, signal, js_sys::Date::now() as u64);
        self.confirming.set(Some((process, signal, text)));
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
                    (pid, format!("{} sent to {what}: {after}", signal.name()), false)
                }
                Err(failure) => {
                    self.session.unauthorized(&failure);
                    (pid, format!("{} to {what}: {}", signal.name(), failure.message), true)
                }
            };
            self.outcome.try_set(Some(outcome));
            self.working.try_set(false);
        });
    }
}

/// "python train.py, ana": the process and whom it counts for.
fn describe(process: &GpuProcess) -> String {
    let command = process.command.as_deref().or(process.name.as_deref()).unwrap_or("?");
    format!("{}, {}", shorten(command, QUESTION_CHARS), process.user_name())
}

/// "Send SIGTERM to PID 4242 (python train.py, ana; running 2h 13m; 1.00 GiB on GPU 0)?"; what is
/// not known (the start time, the memory) is left out.
pub fn question(process: &GpuProcess, signal: Signal, now_ms: u64) -> String {
    let mut facts = vec![describe(process)];
    if let Some(started) = process.started_ms {
        facts.push(format!("running {}", format::duration(now_ms.saturating_sub(started))));
    }
    if let Some(bytes) = process.used_memory {
        facts.push(format!("{} on GPU {}", format_bytes(bytes), process.device));
    }
    format!("Send {} to PID {} ({})?", signal.name(), process.pid, facts.join("; "))
}

/// `button.signal-term`: asks to send SIGTERM to what `process` gives when clicked (the freshest reading).
pub fn stop_button(
    control: SignalControl,
    pid: u32,
    process: impl Fn() -> Option<GpuProcess> + Send + Sync + 'static,
) -> impl IntoView {
    view! {
        <button
            type="button"
            class="small-button signal-term"
            data-pid=pid
            title=format!("Send SIGTERM to PID {pid}: ask it to end (asks first)")
            disabled=move || control.working.get()
            on:click=move |_| {
                if let Some(process) = process() {
                    control.ask(process, Signal::Term);
                }
            }
        >
            "Stop"
        </button>
    }
}

/// `td.actions`: Stop (SIGTERM) and Kill (SIGKILL), each after a confirmation, where the caller may.
#[component]
pub fn SignalButtons(control: SignalControl, process: GpuProcess) -> impl IntoView {
    if !control.may_signal(&process) {
        return view! { <td class="actions"></td> }.into_any();
    }
    let pid = process.pid;
    let term = process.clone();
    view! {
        <td class="actions">
            {stop_button(control, pid, move || Some(term.clone()))}
            " "
            <button
                type="button"
                class="small-button signal-kill"
                data-pid=pid
                title=format!("Send SIGKILL to PID {pid}: end it at once (asks first)")
                disabled=move || control.working.get()
                on:click=move |_| control.ask(process.clone(), Signal::Kill)
            >
                "Kill"
            </button>
        </td>
    }
    .into_any()
}

/// `.signal-confirm` (the question) and `.signal-outcome`: under a process table for every PID,
/// on an alert card for its own `pid` only.
#[component]
pub fn SignalPanel(control: SignalControl, #[prop(optional)] pid: Option<u32>) -> impl IntoView {
    let concerns = move |of: u32| pid.is_none_or(|pid| pid == of);
    let question = move || {
        control.confirming.get().filter(|(process, ..)| concerns(process.pid)).map(|(process, signal, text)| {
            let (pid, name) = (process.pid, signal.name());
            let confirm = match signal {
                Signal::Term => "small-button signal-confirm-send signal-confirm-term",
                Signal::Kill => "small-button signal-confirm-send signal-confirm-kill",
            };
            view! {
                <div class="signal-confirm" role="alertdialog" data-pid=pid data-signal=name>
                    <span class="signal-question">{text}</span>
                    " "
                    <button type="button" class=confirm on:click=move |_| control.send(&process, signal)>
                        {format!("Send {name}")}
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
        control.outcome.get().filter(|(of, ..)| concerns(*of)).map(|(pid, text, failed)| {
            view! { <p class="signal-outcome" class:signal-error=failed role="status" data-pid=pid>{text}</p> }
        })
    };
    view! {
        {question}
        {outcome}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_question_names_the_process_its_owner_running_time_and_memory() {
        let process = GpuProcess {
            user: Some("ana".into()),
            command: Some("python train.py --epochs 90".into()),
            started_ms: Some(1_000),
            used_memory: Some(3 << 29),
            ..shared::testing::process(2, 4242)
        };
        let now = 1_000 + (2 * 3600 + 13 * 60) * 1000;
        assert_eq!(
            question(&process, Signal::Term, now),
            "Send SIGTERM to PID 4242 (python train.py --epochs 90, ana; running 2h 13m; 1.50 GiB on GPU 2)?"
        );
        let unknown = GpuProcess { started_ms: None, used_memory: None, ..process };
        assert_eq!(
            question(&unknown, Signal::Kill, now),
            "Send SIGKILL to PID 4242 (python train.py --epochs 90, ana)?"
        );
    }
}
