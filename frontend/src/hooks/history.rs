//! `use_history_series()`: one history chart's data. Fetches `/api/history` for
//! every range picked (an answer for an older pick is dropped) and merges the
//! device's live samples into the newest bucket.

use leptos::{html, logging, prelude::*, task::spawn_local};
use shared::history::Metric;

use super::api::{ApiFailure, HistoryQuery, fetch_history};
use crate::state::{
    DashboardState,
    history::{HistoryRange, HistorySeries},
};

/// At most this many buckets per chart, whatever the canvas width.
const MAX_POINTS: u32 = 1000;

/// A history chart's series and how its last fetch went.
#[derive(Debug, Clone, Copy)]
pub struct HistoryFeed {
    pub series: RwSignal<HistorySeries>,
    /// The server's message when the last fetch failed.
    pub error: RwSignal<Option<String>>,
    /// Counts answers, so an answer is drawn at once rather than waiting out the live throttle.
    pub answers: RwSignal<u32>,
}

/// The series of GPU `index`'s `metric` over `range`, sized to `canvas`'s width.
pub fn use_history_series(
    state: ReadSignal<DashboardState>,
    index: u32,
    metric: Metric,
    range: ReadSignal<HistoryRange>,
    canvas: NodeRef<html::Canvas>,
) -> HistoryFeed {
    // Until the first answer, a bucket per second of live samples.
    let feed = HistoryFeed {
        series: RwSignal::new(HistorySeries::live(1000)),
        error: RwSignal::new(None),
        answers: RwSignal::new(0),
    };
    let generation = StoredValue::new(0u64);
    Effect::new(move |_| {
        let range = range.get();
        let Some(canvas) = canvas.get() else {
            return;
        };
        let width = canvas.get_bounding_client_rect().width().round();
        let points = if width >= 1.0 { (width as u32).min(MAX_POINTS) } else { 300 };
        let to_ms = js_sys::Date::now() as u64;
        let query =
            HistoryQuery { device: index, metric, from_ms: to_ms.saturating_sub(range.millis()), to_ms, points };
        generation.update_value(|g| *g += 1);
        let mine = generation.get_value();
        feed.series.update(HistorySeries::begin_fetch);
        spawn_local(async move {
            let answer = fetch_history(query).await;
            if generation.try_get_value() == Some(mine) {
                feed.settle(answer, index, metric);
            }
        });
    });

    // The live tail: each new sample joins the newest bucket or opens the next.
    let live = Memo::new(move |_| {
        state.with(|s| {
            let latest = s.device(index)?.latest.as_ref()?;
            Some((latest.timestamp_ms, metric.value(latest)?))
        })
    });
    Effect::new(move |_| {
        if let Some((t, value)) = live.get() {
            let from = (js_sys::Date::now() as u64).saturating_sub(range.get_untracked().millis());
            feed.series.update(|s| {
                s.push(t, value);
                s.trim_before(from);
            });
        }
    });
    feed
}

impl HistoryFeed {
    /// Takes a fetch's answer, or keeps the points and shows why there is none.
    fn settle(self, answer: Result<shared::history::HistoryResponse, ApiFailure>, index: u32, metric: Metric) {
        match answer {
            Ok(answer) => {
                self.series.try_update(|s| s.finish_fetch(answer.bucket_ms, answer.points));
                self.error.try_set(None);
            }
            Err(failure) => {
                logging::warn!("gpudash: history of GPU {index} {}: {failure}", metric.name());
                self.series.try_update(HistorySeries::abandon_fetch);
                self.error.try_set(Some(failure.message));
            }
        }
        self.answers.try_update(|n| *n += 1);
    }
}
