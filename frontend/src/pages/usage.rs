//! `#usage`: who used how much over a range (today, 7 days, 30 days or custom): a table per
//! user and per GPU (sortable), a bar per day stacked by user with its axes
//! (`components::usage_chart`), and the same range as CSV.
//! The figures and the query rules come from `shared::usage`; how they are charged is in
//! docs/ACCOUNTING.md.

use leptos::{prelude::*, task::spawn_local};
use shared::usage::{DAY_MS, UsageGroup, UsageQuery, UsageResponse, UsageRow, day_of, parse_date};

use crate::{
    components::{usage_chart::UsageChart, usage_table::UsageTable},
    hooks::{api::get_json, session::Session},
};

/// The range picker's choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Span {
    Today,
    Week,
    Month,
    Custom,
}

impl Span {
    fn parse(text: &str) -> Self {
        match text {
            "today" => Self::Today,
            "30d" => Self::Month,
            "custom" => Self::Custom,
            _ => Self::Week,
        }
    }
}

/// The browser's zone now, minutes east of UTC (JavaScript counts them west).
fn utc_offset_now() -> i32 {
    -(js_sys::Date::new_0().get_timezone_offset() as i32)
}

/// `UTC+1`, `UTC-5:30`, `UTC`: a zone offset for people.
fn zone_name(utc_offset: i32) -> String {
    let (sign, minutes) = if utc_offset < 0 { ('-', -utc_offset) } else { ('+', utc_offset) };
    match (minutes / 60, minutes % 60) {
        (0, 0) => "UTC".to_owned(),
        (hours, 0) => format!("UTC{sign}{hours}"),
        (hours, rest) => format!("UTC{sign}{hours}:{rest:02}"),
    }
}

/// The query for `span` at `now`, with days in the zone `utc_offset` minutes east of UTC; a
/// custom range runs from the start of its first day to the end of its last (`YYYY-MM-DD` each),
/// checked by the rule the server applies.
fn range_for(
    span: Span,
    now: u64,
    utc_offset: i32,
    (first, last): (&str, &str),
    group: UsageGroup,
) -> Result<UsageQuery, String> {
    let (from, to) = match span {
        Span::Today => (day_of(now, utc_offset), now + 1),
        Span::Week => (now.saturating_sub(7 * DAY_MS), now + 1),
        Span::Month => (now.saturating_sub(30 * DAY_MS), now + 1),
        Span::Custom => {
            let day = |text: &str, name: &str| parse_date(text, utc_offset).ok_or_else(|| format!("pick a {name} day"));
            (day(first, "first")?, day(last, "last")? + DAY_MS)
        }
    };
    UsageQuery::new(from, to, group, utc_offset).map_err(|e| e.to_string())
}

#[component]
pub fn UsagePage() -> impl IntoView {
    let session = expect_context::<Session>();
    let span = RwSignal::new(Span::Week);
    let (first, last) = (RwSignal::new(String::new()), RwSignal::new(String::new()));
    let answers = RwSignal::new(None::<(UsageResponse, UsageResponse, UsageResponse)>);
    let error = RwSignal::new(None::<String>);
    let csv = RwSignal::new(None::<String>);
    let zone = RwSignal::new(utc_offset_now());
    // The workload table's grouping (container, pod, namespace or Slurm job) and its rows.
    let by_workload = RwSignal::new(UsageGroup::Container);
    let workload_rows = RwSignal::new(Vec::<UsageRow>::new());
    let load_workloads = move || {
        let now = js_sys::Date::now() as u64;
        let days = (first.get_untracked(), last.get_untracked());
        let group = by_workload.get_untracked();
        let Ok(query) = range_for(span.get_untracked(), now, zone.get_untracked(), (&days.0, &days.1), group) else {
            return;
        };
        spawn_local(async move {
            if let Ok(answer) = get_json::<UsageResponse>(&format!("/api/usage?{}", query.query_string())).await {
                workload_rows.try_set(answer.rows);
            }
        });
    };
    let load = move || {
        let now = js_sys::Date::now() as u64;
        zone.set(utc_offset_now());
        let days = (first.get_untracked(), last.get_untracked());
        let query = |group| range_for(span.get_untracked(), now, zone.get_untracked(), (&days.0, &days.1), group);
        let (by_user, by_gpu, by_day) =
            match (query(UsageGroup::User), query(UsageGroup::Gpu), query(UsageGroup::UserDay)) {
                (Ok(u), Ok(g), Ok(d)) => (u, g, d),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                    error.set(Some(e));
                    return;
                }
            };
        csv.set(Some(format!("/api/usage.csv?{}", by_user.query_string())));
        load_workloads();
        spawn_local(async move {
            let get = |q: UsageQuery| async move {
                get_json::<UsageResponse>(&format!("/api/usage?{}", q.query_string())).await
            };
            match (get(by_user).await, get(by_gpu).await, get(by_day).await) {
                (Ok(u), Ok(g), Ok(d)) => {
                    answers.try_set(Some((u, g, d)));
                    error.try_set(None);
                }
                (Err(failure), _, _) | (_, Err(failure), _) | (_, _, Err(failure)) => {
                    error.try_set(Some(failure.message.clone()));
                    session.unauthorized(&failure);
                }
            }
        });
    };
    load();
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
                    prop:value=move || match span.get() {
                        Span::Today => "today",
                        Span::Week => "7d",
                        Span::Month => "30d",
                        Span::Custom => "custom",
                    }
                    on:change=move |ev| {
                        span.set(Span::parse(&event_target_value(&ev)));
                        if span.get_untracked() != Span::Custom {
                            load();
                        }
                    }
                >
                    <option value="today">"Today"</option>
                    <option value="7d">"Last 7 days"</option>
                    <option value="30d">"Last 30 days"</option>
                    <option value="custom">"Custom…"</option>
                </select>
                <Show when=move || span.get() == Span::Custom>
                    <input id="usage-from" type="date" on:change=move |ev| first.set(event_target_value(&ev)) />
                    <input id="usage-to" type="date" on:change=move |ev| last.set(event_target_value(&ev)) />
                    <button id="usage-apply" type="button" class="small-button" on:click=move |_| load()>"Show"</button>
                </Show>
                <a id="usage-csv" class="small-button" href=move || csv.get().unwrap_or_default() download="">
                    "Download CSV"
                </a>
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
            <UsageChart rows=Signal::derive(move || rows(|a| &a.2)) zone=zone />
            <h3>"Per owner"</h3>
            <UsageTable id="usage-users" key="Owner" rows=Signal::derive(move || rows(|a| &a.0)) />
            <div class="section-head">
                <h3>"Per workload"</h3>
                <select
                    id="usage-workload-group"
                    aria-label="Group workloads by"
                    prop:value=move || by_workload.get().name()
                    on:change=move |ev| {
                        let name = event_target_value(&ev);
                        if let Some(group) = UsageGroup::ALL.into_iter().find(|g| g.name() == name) {
                            by_workload.set(group);
                            load_workloads();
                        }
                    }
                >
                    <option value="container">"Container"</option>
                    <option value="pod">"Pod"</option>
                    <option value="namespace">"Namespace"</option>
                    <option value="job">"Slurm job"</option>
                </select>
            </div>
            <UsageTable id="usage-workloads" key="Workload" rows=Signal::derive(move || workload_rows.get()) />
            <h3>"Per GPU"</h3>
            <UsageTable id="usage-gpus" key="GPU" rows=Signal::derive(move || rows(|a| &a.1)) />
            <p class="hint">
                {move || format!(
                    "Days run from midnight to midnight in your time zone ({}). GPU-hours split a shared GPU by SM \
                     share; nothing is charged while gpudash was not running.",
                    zone_name(zone.get()),
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
        let utc = |span, days, group| range_for(span, now, 0, days, group);
        let today = utc(Span::Today, ("", ""), UsageGroup::User).unwrap();
        assert_eq!((today.from, today.to, today.utc_offset), (20_000 * DAY_MS, now + 1, 0));
        let week = utc(Span::Week, ("", ""), UsageGroup::Gpu).unwrap();
        assert_eq!(week.to - week.from, 7 * DAY_MS + 1);
        let custom = utc(Span::Custom, ("1970-01-02", "1970-01-03"), UsageGroup::User).unwrap();
        assert_eq!((custom.from, custom.to), (DAY_MS, 3 * DAY_MS));
        assert!(utc(Span::Custom, ("", "1970-01-03"), UsageGroup::User).unwrap_err().contains("first day"));
        assert!(utc(Span::Custom, ("1970-01-05", "1970-01-03"), UsageGroup::User).unwrap_err().contains("before"));
        assert!(utc(Span::Custom, ("2020-01-01", "2022-01-01"), UsageGroup::User).unwrap_err().contains("366"));
        // Five seconds past midnight UTC is still yesterday evening in UTC−5: "today" began 19 h ago.
        let west = range_for(Span::Today, now, -300, ("", ""), UsageGroup::User).unwrap();
        assert_eq!((west.from, west.utc_offset), (19_999 * DAY_MS + 5 * HOUR, -300));
        assert_eq!(now - west.from, 19 * HOUR + 5_000);
        let east = range_for(Span::Custom, now, 60, ("1970-01-02", "1970-01-02"), UsageGroup::User).unwrap();
        assert_eq!((east.from, east.to), (DAY_MS - HOUR, 2 * DAY_MS - HOUR), "a custom day is the zone's day");
        assert_eq!((zone_name(0), zone_name(60), zone_name(-330)), ("UTC".into(), "UTC+1".into(), "UTC-5:30".into()));
    }
}
