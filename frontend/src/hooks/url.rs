//! The page's view as signals, kept in the URL (`state::url`): read once at start, written with
//! `history.replaceState` as the view changes (`pushState` when the tab changes, so Back returns to
//! the previous tab), and read again when the reader goes back or forward.

use std::collections::BTreeSet;

use leptos::{ev, prelude::*};
use shared::history::Metric;
use wasm_bindgen::JsValue;

use crate::{
    components::process_sort::SortOrder,
    pages::Tab,
    state::{
        history::HistoryRange,
        process_filter::ProcessFilter,
        url::{JobsView, Layout, UrlView, UsageView},
    },
};

/// Every part of the view a link holds; provided as context by `App`.
#[derive(Debug, Clone, Copy)]
pub struct ViewSignals {
    pub tab: RwSignal<Tab>,
    pub cards: RwSignal<BTreeSet<u32>>,
    pub filter: RwSignal<ProcessFilter>,
    pub sort: RwSignal<SortOrder>,
    pub range: RwSignal<HistoryRange>,
    pub drill: RwSignal<Option<u32>>,
    /// What ranks the History lines past eight GPUs.
    pub rank: RwSignal<Metric>,
    pub layout: RwSignal<Layout>,
    pub state: RwSignal<Option<String>>,
    pub owner: RwSignal<Option<String>>,
    pub lab_gpu: RwSignal<Option<u32>>,
    /// The lab's own `selected` run.
    pub run: RwSignal<Option<u64>>,
    /// The Usage tab's range and workload grouping.
    pub usage: RwSignal<UsageView>,
    /// The Jobs tab's filters and the job opened.
    pub jobs: RwSignal<JobsView>,
    /// The GPUs the reservation form has ticked (not kept in the URL): a card's Reserve sets it.
    pub reserve_gpus: RwSignal<Vec<u32>>,
}

impl ViewSignals {
    fn read(self) -> UrlView {
        UrlView {
            tab: self.tab.get(),
            cards: self.cards.get(),
            filter: self.filter.get(),
            sort: self.sort.get(),
            range: self.range.get(),
            drill: self.drill.get(),
            rank: self.rank.get(),
            layout: self.layout.get(),
            state: self.state.get(),
            owner: self.owner.get(),
            lab_gpu: self.lab_gpu.get(),
            run: self.run.get(),
            usage: self.usage.get(),
            jobs: self.jobs.get(),
        }
    }

    /// Sets what differs (a signal set to its own value would still wake its readers).
    fn apply(self, view: UrlView) {
        fn put<T: PartialEq + Send + Sync + 'static>(signal: RwSignal<T>, value: T) {
            if signal.with_untracked(|v| *v != value) {
                signal.set(value);
            }
        }
        put(self.tab, view.tab);
        match view.tab {
            Tab::Dashboard => {
                put(self.cards, view.cards);
                put(self.filter, view.filter);
                put(self.sort, view.sort);
                put(self.range, view.range);
                put(self.drill, view.drill);
                put(self.rank, view.rank);
                put(self.layout, view.layout);
                put(self.state, view.state);
                put(self.owner, view.owner);
            }
            Tab::Usage => put(self.usage, view.usage),
            Tab::Jobs => put(self.jobs, view.jobs),
            Tab::Lab => {
                put(self.lab_gpu, view.lab_gpu);
                if view.run.is_some() {
                    put(self.run, view.run);
                }
            }
            _ => {}
        }
    }

    /// Opens GPU `index`'s card on the dashboard and scrolls to it.
    pub fn open_card(self, index: u32) {
        self.tab.set(Tab::Dashboard);
        self.cards.update(|open| {
            open.insert(index);
        });
        request_animation_frame(move || {
            if let Some(card) = document().get_element_by_id(&format!("gpu-detail-{index}")) {
                card.scroll_into_view();
            }
        });
    }

    /// The Lab, with GPU `index` picked.
    pub fn lab_on(self, index: u32) {
        self.lab_gpu.set(Some(index));
        self.tab.set(Tab::Lab);
    }
}

fn fragment() -> String {
    window().location().hash().unwrap_or_default()
}

/// The view's signals, set from the URL, and the two ways they follow each other.
pub fn use_url_view(run: RwSignal<Option<u64>>) -> ViewSignals {
    let first = UrlView::parse(&fragment());
    let signals = ViewSignals {
        tab: RwSignal::new(first.tab),
        cards: RwSignal::new(first.cards.clone()),
        filter: RwSignal::new(first.filter.clone()),
        sort: RwSignal::new(first.sort),
        range: RwSignal::new(first.range),
        drill: RwSignal::new(first.drill),
        rank: RwSignal::new(first.rank),
        layout: RwSignal::new(first.layout),
        state: RwSignal::new(first.state.clone()),
        owner: RwSignal::new(first.owner.clone()),
        lab_gpu: RwSignal::new(first.lab_gpu),
        run,
        usage: RwSignal::new(first.usage.clone()),
        jobs: RwSignal::new(first.jobs.clone()),
        reserve_gpus: RwSignal::new(Vec::new()),
    };
    if first.run.is_some() {
        run.set(first.run);
    }
    Effect::new(move |_| {
        let view = signals.read();
        let now = fragment();
        let encoded = view.encode();
        if encoded == now || (now.is_empty() && view == UrlView::default()) {
            return;
        }
        let Ok(history) = window().history() else { return };
        // A new tab is a new entry for Back; anything else replaces the entry.
        let _ = if UrlView::parse(&now).tab == view.tab {
            history.replace_state_with_url(&JsValue::NULL, "", Some(&encoded))
        } else {
            history.push_state_with_url(&JsValue::NULL, "", Some(&encoded))
        };
    });
    // Back, Forward, a typed or followed link: a bare `#lab` (the tabs' own) switches the tab alone.
    let follow = window_event_listener(ev::hashchange, move |_| {
        let now = fragment();
        let view = UrlView::parse(&now);
        if now.contains('?') {
            signals.apply(view);
        } else if signals.tab.get_untracked() != view.tab {
            signals.tab.set(view.tab);
        }
    });
    on_cleanup(move || follow.remove());
    signals
}
