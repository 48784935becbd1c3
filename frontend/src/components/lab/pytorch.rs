//! "In PyTorch": each experiment's `torch.cuda` snippet, copyable, and under a
//! run's result the one-line takeaway computed from its figures. The server
//! sends both in the experiment's own words (`ExperimentInfo::snippet`,
//! `Run::takeaway`), so nothing here names a kind.

use leptos::prelude::*;
use shared::lab::ExperimentKind;
use wasm_bindgen::{JsCast, JsValue};

use crate::hooks::lab::Lab;

/// `details.lab-pytorch[data-kind]`: the experiment's snippet (from `GET /api/lab/experiments`) in a
/// `<pre><code>` block with a copy button; nothing until the experiments are loaded.
#[component]
pub fn InPyTorch(kind: ExperimentKind, #[prop(optional)] open: bool) -> impl IntoView {
    let lab = expect_context::<Lab>();
    let code = {
        let kind = kind.clone();
        Memo::new(move |_| {
            lab.experiments
                .with(|e| e.iter().find(|e| e.kind == kind && !e.snippet.is_empty()).map(|e| e.snippet.clone()))
        })
    };
    let copied = RwSignal::new(None::<bool>);
    let copy = move |_| copied.set(code.with_untracked(|c| c.as_deref().map(copy_text)));
    move || {
        code.get().map(|code| {
            view! {
                <details class="lab-pytorch" data-kind=kind.name().to_owned() open=open>
                    <summary>"In PyTorch"</summary>
                    <div class="lab-pytorch-body">
                        <button
                            type="button"
                            class="copy-snippet small-button"
                            aria-label=format!("Copy the PyTorch snippet of {}", kind.name())
                            on:click=copy
                        >
                            {move || match copied.get() {
                                Some(true) => "copied",
                                Some(false) => "select and copy",
                                None => "copy",
                            }}
                        </button>
                        <pre><code class="language-python">{code}</code></pre>
                    </div>
                </details>
            }
        })
    }
}

/// `p.lab-takeaway`: what this run's figures mean for a PyTorch program.
#[component]
pub fn Takeaway(line: String) -> impl IntoView {
    view! {
        <p class="lab-takeaway">
            <strong>"Takeaway: "</strong>
            {line}
        </p>
    }
}

/// `navigator.clipboard.writeText(text)`, looked up by name: web-sys's Clipboard feature for one call
/// is not worth its build. False where the page may not write to the clipboard.
fn copy_text(text: &str) -> bool {
    let Some(window) = web_sys::window() else { return false };
    let get = |target: &JsValue, key: &str| {
        js_sys::Reflect::get(target, &JsValue::from_str(key)).ok().filter(|v| !v.is_undefined() && !v.is_null())
    };
    let window: JsValue = window.into();
    let Some(clipboard) = get(&window, "navigator").and_then(|n| get(&n, "clipboard")) else { return false };
    let Some(write) = get(&clipboard, "writeText").and_then(|f| f.dyn_into::<js_sys::Function>().ok()) else {
        return false;
    };
    write.call1(&clipboard, &JsValue::from_str(text)).is_ok()
}
