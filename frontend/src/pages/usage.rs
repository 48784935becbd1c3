//! `#usage`: who used how much over a range (today, 7 days, 30 days or custom): a table per
//! user and per GPU (sortable), a bar per day stacked by user with its axes
//! (`components::usage_chart`), and each table over the same range as CSV; the range and the
//! workload grouping live in the URL (`#usage?range=30d&by=pod`, `state::url::UsageView`).
//! The figures and the query rules come from `shared::usage`; how they are charged is in
//! docs/ACCOUNTING.md.

use leptos::{prelude::*, task::spawn_local};
use shared::usage::{DAY_MS, UsageGroup, UsageQuery, UsageResponse, UsageRow, day_of, parse_date};

use crate::{
    components::{format, usage_chart::UsageChart, usage_table::UsageTable},
    hooks::{api::get_json, session::Session, url::ViewSignals},
    state::url::{UsageSpan, UsageView, WORKLOAD_GROUPS},
};

/// The query of `view`'s range at `now`, grouped by `group`, with days in the zone `utc_offset`
/// minutes east of UTC; a custom range runs from the start of its first day to the end of its
/// last (`YYYY-MM-DD` each), checked by the rule the server applies.
fn range_for(view: &UsageView, now: u64, utc_offset: i32, group: UsageGroup) -> Result<UsageQuery, String> {
    let (from, to) = match view.span {
        UsageSpan::Today => (day_of(now, utc_offset), now + 1),
        UsageSpan::Week => (now.saturating_sub(7 * DAY_MS), now + 1),
        UsageSpan::Month => (now.saturating_sub(30 * DAY_MS), now + 1),
        UsageSpan::Custom => {
            let day = |text: &str, name: &str| parse_date(text, utc_offset).ok_or_else(|| format!("pick a {name} day"));
            (day(&view.first, "first")?, day(&view.last, "last")? + DAY_MS)
        }
    };
    UsageQuery::new(from, to, group, utc_offset).map_err(|e| e.to_string())
}

/// `a.usage-csv`: the table beside it, over the same range, as CSV (`GET /api/usage.csv`).
#[component]
fn CsvLink(id: &'static str, what: &'static str, query: Memo<Option<UsageQuery>>) -> impl IntoView {
    view! {
        <a
            id=id
            class="small-button usage-csv"
            href=move || query.get().map(|q| format!("/api/usage.csv?{}", q.query_string())).unwrap_or_default()
            download=""
            title=format!("{what}, over this range, as CSV")
        >
            "CSV"
        </a>
    }
}

#[component]
pub fn UsagePage() -> impl IntoView {
    let session = expect_context::<Session>();
    let usage = expect_context::<ViewSignals>().usage;
    // The custom range's days as typed, applied by "Show".
    let (first, last) = (RwSignal::new(usage.get_untracked().first), RwSignal::new(usage.get_untracked().last));
    let answers = RwSignal::new(None::<(UsageResponse, UsageResponse, UsageResponse)>);
    let error = RwSignal::new(None::<String>);
    let zone = RwSignal::new(format::utc_offset());
    let workload_rows = RwSignal::new(Vec::<UsageRow>::new());
    // What every table and its CSV link ask: the range in the URL, fixed when it changes (so
    // "today" and "last 7 days" end at the moment they were picked, or the tab was opened).
    let asked = Memo::new(move |_| {
        let view = usage.get();
        let (now, offset) = (js_sys::Date::now() as u64, format::utc_offset());
        let queries: Result<Vec<UsageQuery>, String> =
            [UsageGroup::User, UsageGroup::Gpu, UsageGroup::UserDay, view.by]
                .into_iter()
                .map(|group| range_for(&view, now, offset, group))
                .collect();
        queries.map(|q| (q, offset))
    });
    // Per owner, per GPU, per owner and day, per workload: the tables' and their CSV links' queries.
    let query_of = move |table: usize| Memo::new(move |_| asked.with(|a| a.as_ref().ok().map(|(q, _)| q[table])));
    let (by_user, by_gpu, by_day, by_workload) = (query_of(0), query_of(1), query_of(2), query_of(3));
    Effect::new(move |_| {
        let (queries, offset) = match asked.get() {
            Ok(asked) => asked,
            Err(e) => {
                // A custom range not yet picked in full says nothing; a wrong one says what is wrong.
                let unpicked = usage.with_untracked(|v| v.first.is_empty() || v.last.is_empty());
                error.set((!unpicked).then_some(e));
                return;
            }
        };
        zone.set(offset);
        spawn_local(async move {
            let get = |q: UsageQuery| async move {
                get_json::<UsageResponse>(&format!("/api/usage?{}", q.query_string())).await
            };
            match (get(queries[0]).await, get(queries[1]).await, get(queries[2]).await, get(queries[3]).await) {
                (Ok(u), Ok(g), Ok(d), Ok(w)) => {
                    answers.try_set(Some((u, g, d)));
                    workload_rows.try_set(w.rows);
                    error.try_set(None);
                }
                (Err(failure), ..) | (_, Err(failure), ..) | (_, _, Err(failure), _) | (.., Err(failure)) => {
                    error.try_set(Some(failure.message.clone()));
                    session.unauthorized(&failure);
                }
            }
        });
    });
    let rows = move |pick: fn(&(UsageResponse, UsageResponse, UsageResponse)) -> &UsageResponse| {
        answers.with(|a| a.as_ref().map(|a| pick(a).rows.clone()).unwrap_or_default())
    };
    let empty = move || answers.with(|a| a.as_ref().is_some_and(|a| a.0.rows.is_empty()));
    view! {
        <main class="usage-page">
            <div class="section-head">
                <h2 class="section-title">"Usage"</h2>
                <select
                    id="usage-range"
                    aria-label="Range"
                    prop:value=move || usage.with(|v| v.span.key())
                    on:change=move |ev| {
                        let span = UsageSpan::from_key(&event_target_value(&ev)).unwrap_or_default();
                        usage.update(|v| v.span = span);
                    }
                >
                    <option value="today">"Today"</option>
                    <option value="7d">"Last 7 days"</option>
                    <option value="30d">"Last 30 days"</option>
                    <option value="custom">"Custom…"</option>
                </select>
                <Show when=move || usage.with(|v| v.span == UsageSpan::Custom)>
                    <input id="usage-from" type="date" aria-label="First day" prop:value=move || first.get()
                        on:change=move |ev| first.set(event_target_value(&ev)) />
                    <input id="usage-to" type="date" aria-label="Last day" prop:value=move || last.get()
                        on:change=move |ev| last.set(event_target_value(&ev)) />
                    <button id="usage-apply" type="button" class="small-button" on:click=move |_| {
                        usage.update(|v| (v.first, v.last) = (first.get_untracked(), last.get_untracked()));
                    }>"Show"</button>
                </Show>
            </div>
            <Show when=move || error.with(Option::is_some)>
                <p class="lab-error usage-error" role="alert">{move || error.get().unwrap_or_default()}</p>
            </Show>
            <Show when=empty>
                <p id="usage-empty" class="placeholder">
                    "No GPU use in this range yet. Each user's GPU-hours, memory GiB-hours, idle-held GiB-hours \
                     and energy appear here as soon as their processes run on a GPU."
                </p>
            </Show>
            <div class="usage-table-head">
                <h3>"Per owner and day"</h3>
                <CsvLink id="usage-csv-days" what="Each owner's use per day" query=by_day />
            </div>
            <UsageChart rows=Signal::derive(move || rows(|a| &a.2)) zone=zone />
            <div class="usage-table-head">
                <h3>"Per owner"</h3>
                <CsvLink id="usage-csv" what="Each owner's use" query=by_user />
            </div>
            <UsageTable id="usage-users" key="Owner" rows=Signal::derive(move || rows(|a| &a.0)) />
            <div class="usage-table-head">
                <h3>"Per workload"</h3>
                <select
                    id="usage-workload-group"
                    aria-label="Group workloads by"
                    prop:value=move || usage.with(|v| v.by.name())
                    on:change=move |ev| {
                        let name = event_target_value(&ev);
                        if let Some(group) = WORKLOAD_GROUPS.into_iter().find(|g| g.name() == name) {
                            usage.update(|v| v.by = group);
                        }
                    }
                >
                    <option value="container">"Container"</option>
                    <option value="pod">"Pod"</option>
                    <option value="namespace">"Namespace"</option>
                    <option value="job">"Slurm job"</option>
                </select>
                <CsvLink id="usage-csv-workloads" what="Each workload's use" query=by_workload />
            </div>
            <UsageTable id="usage-workloads" key="Workload" rows=Signal::derive(move || workload_rows.get()) />
            <div class="usage-table-head">
                <h3>"Per GPU"</h3>
                <CsvLink id="usage-csv-gpus" what="Each GPU's use" query=by_gpu />
            </div>
            <UsageTable id="usage-gpus" key="GPU" rows=Signal::derive(move || rows(|a| &a.1)) />
            <p class="hint">
                {move || format!(
                    "Days run from midnight to midnight in your time zone ({}). GPU-hours split a shared GPU by SM \
                     share; nothing is charged while gpudash was not running.",
                    shared::time::zone_name(zone.get()),
                )}
            </p>
        </main>
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_the_picker_and_the_shared_rule() {
        const HOUR: u64 = 3_600_000;
        let now = 20_000 * DAY_MS + 5_000;
        let view = |span, (first, last): (&str, &str)| UsageView {
            span,
            first: first.to_owned(),
            last: last.to_owned(),
            ..UsageView::default()
        };
        let utc = |span, days, group| range_for(&view(span, days), now, 0, group);
        let today = utc(UsageSpan::Today, ("", ""), UsageGroup::User).unwrap();
        assert_eq!((today.from, today.to, today.utc_offset), (20_000 * DAY_MS, now + 1, 0));
        let week = utc(UsageSpan::Week, ("", ""), UsageGroup::Gpu).unwrap();
        assert_eq!(week.to - week.from, 7 * DAY_MS + 1);
        let custom = utc(UsageSpan::Custom, ("1970-01-02", "1970-01-03"), UsageGroup::User).unwrap();
        assert_eq!((custom.from, custom.to), (DAY_MS, 3 * DAY_MS));
        assert!(utc(UsageSpan::Custom, ("", "1970-01-03"), UsageGroup::User).unwrap_err().contains("first day"));
        assert!(utc(UsageSpan::Custom, ("1970-01-05", "1970-01-03"), UsageGroup::User).unwrap_err().contains("before"));
        assert!(utc(UsageSpan::Custom, ("2020-01-01", "2022-01-01"), UsageGroup::User).unwrap_err().contains("366"));
        // Five seconds past midnight UTC is still yesterday evening in UTC−5: "today" began 19 h ago.
        let west = range_for(&view(UsageSpan::Today, ("", "")), now, -300, UsageGroup::User).unwrap();
        assert_eq!((west.from, west.utc_offset), (19_999 * DAY_MS + 5 * HOUR, -300));
        assert_eq!(now - west.from, 19 * HOUR + 5_000);
        let east =
            range_for(&view(UsageSpan::Custom, ("1970-01-02", "1970-01-02")), now, 60, UsageGroup::User).unwrap();
        assert_eq!((east.from, east.to), (DAY_MS - HOUR, 2 * DAY_MS - HOUR), "a custom day is the zone's day");
    }
}
