//! The empty_cache button of a GPU in the Lab's pool panel: hands the lab's cached pool
//! memory on that GPU back to the driver, and says how much it released. It is the
//! lab's pool, not the reader's process's (that one is the PyTorch bridge's).

use leptos::{prelude::*, task::spawn_local};
use shared::{auth::Role, units::format_bytes};

use crate::hooks::{lab::Lab, session::Session};

/// `button.empty-cache` and `.empty-cache-result` for GPU `index`; nothing without the lab or the operator role.
#[component]
pub fn EmptyCache(index: u32) -> impl IntoView {
    let (Some(lab), Some(session)) = (use_context::<Lab>(), use_context::<Session>()) else {
        return ().into_any();
    };
    let shown = move || session.may_change(Role::Operator) && lab.state.with(|s| s.available() == Some(true));
    let busy = Memo::new(move |_| lab.state.with(|s| s.busy(index)));
    let pool = Memo::new(move |_| {
        lab.state.with(|s| {
            s.status.as_ref()?.devices.iter().find(|d| d.index == index && d.pool_reserved > 0).map(|d| d.pool_reserved)
        })
    });
    // The latest trim of this GPU's pool (this click, another viewer's, or the idle release), or why ours failed.
    let released = Memo::new(move |_| {
        lab.state.with(|s| s.trim(index).map(|t| format!("released {}", format_bytes(t.released_bytes))))
    });
    let error = RwSignal::new(None::<String>);
    let working = RwSignal::new(false);
    let click = move |_| {
        working.set(true);
        spawn_local(async move {
            match lab.empty_cache(index).await {
                Ok(_) => drop(error.try_set(None)),
                Err(failure) => {
                    session.unauthorized(&failure);
                    error.try_set(Some(failure.message));
                }
            }
            working.try_set(false);
        });
    };
    let title = move || {
        if busy.get() {
            format!("GPU {index} has lab runs queued or running; empty the cache once they end")
        } else {
            format!(
                "Hand the lab's cached memory on GPU {index} back to the driver (torch.cuda.empty_cache() for the \
                 lab's own pool; your process's cache is not touched)"
            )
        }
    };
    view! {
        <Show when=shown>
            <div class="lab-cache">
                <button
                    type="button"
                    class="empty-cache small-button"
                    disabled=move || busy.get() || working.get()
                    title=title
                    on:click=click
                >
                    "empty_cache"
                </button>
                {move || pool.get().map(|bytes| view! { <span class="lab-pool">{format!("lab pool holds {}", format_bytes(bytes))}</span> })}
                {move || match (error.get(), released.get()) {
                    (Some(text), _) => Some(view! { <span class="empty-cache-result empty-cache-error" role="alert">{text}</span> }.into_any()),
                    (None, Some(text)) => Some(view! { <span class="empty-cache-result">{text}</span> }.into_any()),
                    (None, None) => None,
                }}
            </div>
        </Show>
    }
    .into_any()
}
