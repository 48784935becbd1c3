//! `use_history()`: the data of every history chart. One `/api/history/all`
//! request per range picked (an answer for an older pick is dropped) brings every
//! metric of every GPU; each tick's samples are merged into the newest buckets.

use leptos::{logging, prelude::*, task::spawn_local};
use shared::history::HistoryAllResponse;

use super::api::{ApiFailure, fetch_history_all};
use crate::state::{
    DashboardState,
    history::{HistoryRange, HistorySet},
};

/// At most this many buckets per line, whatever the window's width.
const MAX_POINTS: u32 = 1000;

/// The history charts' series and how the last fetch went.
#[derive(Debug, Clone, Copy)]
pub struct HistoryFeed {
    pub set: RwSignal<HistorySet>,
    /// The server's message when the last fetch failed.
    pub error: RwSignal<Option<String>>,
    /// Counts answers, so an answer is drawn at once rather than waiting out the live throttle.
    pub answers: RwSignal<u32>,
    /// Requests sent, for the page's tests to read.
    pub requests: RwSignal<u32>,
}

/// Every GPU's charted metrics over `range`, fetched while `enabled` (history is on).
pub fn use_history(
    state: ReadSignal<DashboardState>,
    range: ReadSignal<HistoryRange>,
    enabled: Memo<bool>,
) -> HistoryFeed {
    let feed = HistoryFeed {
        set: RwSignal::new(HistorySet::default()),
        error: RwSignal::new(None),
        answers: RwSignal::new(0),
        requests: RwSignal::new(0),
    };
    let generation = StoredValue::new(0u64);
    Effect::new(move |_| {
        let range = range.get();
        if !enabled.get() {
            return;
        }
        // About a bucket per CSS pixel of a chart as wide as the window.
        let width = window().inner_width().ok().and_then(|w| w.as_f64()).unwrap_or(1000.0);
        let points = (width.round() as u32).clamp(300, MAX_POINTS);
        let to_ms = js_sys::Date::now() as u64;
        generation.update_value(|g| *g += 1);
        let mine = generation.get_value();
        feed.set.update(HistorySet::begin_fetch);
        feed.requests.update(|n| *n += 1);
        spawn_local(async move {
            let answer = fetch_history_all(range, to_ms, points).await;
            if generation.try_get_value() == Some(mine) {
                feed.settle(answer);
            }
        });
    });

    // The live tail: each GPU's new sample joins its newest buckets or opens the next.
    Effect::new(move |_| {
        let from = (js_sys::Date::now() as u64).saturating_sub(range.get_untracked().millis());
        state.with(|s| {
            feed.set.update(|set| {
                for device in &s.devices {
                    if let Some(latest) = device.latest.as_ref() {
                        set.push(device.info.index, latest.timestamp_ms, |m| m.value(latest), from);
                    }
                }
            });
        });
    });
    feed
}

impl HistoryFeed {
    /// Takes a fetch's answer, or keeps the points and shows why there is none.
    fn settle(self, answer: Result<HistoryAllResponse, ApiFailure>) {
        match answer {
            Ok(answer) => {
                self.set.try_update(|s| s.finish_fetch(answer));
                self.error.try_set(None);
            }
            Err(failure) => {
                logging::warn!("gpudash: history: {failure}");
                self.set.try_update(HistorySet::abandon_fetch);
                self.error.try_set(Some(failure.message));
            }
        }
        self.answers.try_update(|n| *n += 1);
    }
}
