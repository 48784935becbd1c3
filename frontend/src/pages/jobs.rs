//! `#jobs`: running and recent jobs (each workload from its first GPU process to its last), a
//! table filtered by owner, runtime and state and sorted on a click, and the job opened
//! (`#jobs?job=12`, a deep link): its verdicts with the figures behind them, what it used, and
//! its own activity over its life. The figures and the verdict rules are `shared::jobs`'; the
//! page asks `GET /api/jobs` (refreshed every 10 s while shown) and `GET /api/jobs/{id}`.

use leptos::{prelude::*, task::spawn_local};
use shared::jobs::{Grade, JobReport, JobsQuery, JobsResponse, Runtime};

use crate::{
    components::{
        format,
        job_detail::{JobDetail, gib, grade_word, length, share},
        job_notices::JobNoticesPanel,
    },
    hooks::{api::get_json, session::Session, url::ViewSignals},
    state::url::JobsView,
};

/// How often the list is asked again while the tab is shown.
const REFRESH_MS: i32 = 10_000;

/// The table's columns that sort, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Started,
    Name,
    Owner,
    Length,
    HeldHours,
    SmActivity,
    Idle,
    MemoryPeak,
    Energy,
    Verdict,
}

impl Column {
    const ALL: [(Column, &'static str); 10] = [
        (Column::Started, "Started"),
        (Column::Name, "Job"),
        (Column::Owner, "Owner"),
        (Column::Length, "Length"),
        (Column::HeldHours, "GPU-hours"),
        (Column::SmActivity, "SM activity"),
        (Column::Idle, "Idle"),
        (Column::MemoryPeak, "Memory peak"),
        (Column::Energy, "Energy kWh"),
        (Column::Verdict, "Verdict"),
    ];

    fn number(self, r: &JobReport) -> f64 {
        let f = &r.job.figures;
        match self {
            Column::Started => r.job.started_ms as f64,
            Column::Length => r.job.length_ms() as f64,
            Column::HeldHours => f.held_s,
            Column::SmActivity => f.sm_active_mean.unwrap_or(-1.0),
            Column::Idle => f.idle_share(),
            Column::MemoryPeak => f.memory_peak_bytes as f64,
            Column::Energy => r.energy_kwh,
            Column::Verdict => grade_rank(r.grade),
            Column::Name | Column::Owner => 0.0,
        }
    }
}

fn grade_rank(grade: Grade) -> f64 {
    match grade {
        Grade::Unjudged => -1.0,
        Grade::Good => 0.0,
        Grade::Hint => 1.0,
        Grade::Poor => 2.0,
    }
}

/// `jobs` in `by`'s order (`None`: newest first, as the server lists them).
pub fn sorted(mut jobs: Vec<JobReport>, by: Option<(Column, bool)>) -> Vec<JobReport> {
    let Some((column, descending)) = by else { return jobs };
    shared::order::sort_by(&mut jobs, |a, b| {
        let order = match column {
            Column::Name => a.job.name.to_lowercase().cmp(&b.job.name.to_lowercase()),
            Column::Owner => a.job.owner.to_lowercase().cmp(&b.job.owner.to_lowercase()),
            _ => column.number(a).total_cmp(&column.number(b)),
        };
        if descending { order.reverse() } else { order }
    });
    jobs
}

/// The query the filters of `view` ask: the table's newest 100, or for an export the most one
/// answer holds.
pub fn query_of(view: &JobsView, export: bool) -> JobsQuery {
    JobsQuery {
        owner: view.owner.clone(),
        runtime: view.runtime,
        running: view.running,
        before: None,
        limit: if export { shared::jobs::MAX_LIMIT } else { shared::jobs::DEFAULT_LIMIT },
    }
}

#[component]
pub fn JobsPage() -> impl IntoView {
    let session = expect_context::<Session>();
    let view_signal = expect_context::<ViewSignals>().jobs;
    let answer = RwSignal::new(None::<JobsResponse>);
    let error = RwSignal::new(None::<String>);
    let sort = RwSignal::new(None::<(Column, bool)>);
    let owner_typed = RwSignal::new(view_signal.get_untracked().owner.unwrap_or_default());
    let query = Memo::new(move |_| view_signal.with(|v| query_of(v, false)));
    let export = Memo::new(move |_| view_signal.with(|v| query_of(v, true)).query_string());
    // The owner box follows the URL (Back, a link), not only what was typed.
    Effect::new(move |_| owner_typed.set(view_signal.with(|v| v.owner.clone().unwrap_or_default())));
    let tick = RwSignal::new(0u32);
    // Only the newest request's answer is shown (an older, slower one may land after it).
    let asked = StoredValue::new(0u64);
    let load = move || {
        let q = query.get_untracked();
        asked.update_value(|n| *n += 1);
        let this = asked.get_value();
        spawn_local(async move {
            let got = get_json::<JobsResponse>(&format!("/api/jobs?{}", q.query_string())).await;
            if asked.try_get_value() != Some(this) {
                return;
            }
            match got {
                Ok(a) => {
                    answer.try_set(Some(a));
                    error.try_set(None);
                }
                Err(failure) => {
                    error.try_set(Some(failure.message.clone()));
                    session.unauthorized(&failure);
                }
            }
        });
    };
    Effect::new(move |_| {
        query.track();
        tick.track();
        load();
    });
    let interval = set_interval_with_handle(
        move || {
            let _ = tick.try_update(|t| *t += 1);
        },
        std::time::Duration::from_millis(REFRESH_MS as u64),
    );
    on_cleanup(move || {
        if let Ok(handle) = interval {
            handle.clear();
        }
    });
    let rows = move || sorted(answer.with(|a| a.as_ref().map(|a| a.jobs.clone()).unwrap_or_default()), sort.get());
    let aria = move |column: Column| match sort.get() {
        Some((c, true)) if c == column => "descending",
        Some((c, false)) if c == column => "ascending",
        _ => "none",
    };
    let click = move |column: Column| {
        sort.update(|s| {
            *s = match *s {
                Some((c, d)) if c == column => Some((column, !d)),
                _ => Some((column, !matches!(column, Column::Name | Column::Owner))),
            };
        });
    };
    let open = move |id: u64| view_signal.update(|v| v.job = Some(id));
    view! {
        <main class="jobs-page">
            <div class="section-head">
                <h2 class="section-title">"Jobs"</h2>
                <input
                    id="jobs-owner"
                    type="search"
                    aria-label="Owner"
                    placeholder="Owner"
                    prop:value=move || owner_typed.get()
                    on:input=move |ev| owner_typed.set(event_target_value(&ev))
                    on:change=move |ev| {
                        let owner = event_target_value(&ev).trim().to_owned();
                        view_signal.update(|v| v.owner = (!owner.is_empty()).then_some(owner));
                    }
                />
                <select
                    id="jobs-runtime"
                    aria-label="Runtime"
                    prop:value=move || view_signal.with(|v| v.runtime.map_or("all", Runtime::name))
                    on:change=move |ev| {
                        let runtime = Runtime::parse(&event_target_value(&ev));
                        view_signal.update(|v| v.runtime = runtime);
                    }
                >
                    <option value="all">"All runtimes"</option>
                    <option value="slurm">"Slurm jobs"</option>
                    <option value="pod">"Pods"</option>
                    <option value="container">"Containers"</option>
                    <option value="process">"Processes"</option>
                </select>
                <select
                    id="jobs-state"
                    aria-label="State"
                    prop:value=move || view_signal.with(|v| match v.running {
                        Some(true) => "running",
                        Some(false) => "ended",
                        None => "all",
                    })
                    on:change=move |ev| {
                        let running = match event_target_value(&ev).as_str() {
                            "running" => Some(true),
                            "ended" => Some(false),
                            _ => None,
                        };
                        view_signal.update(|v| v.running = running);
                    }
                >
                    <option value="all">"Running and ended"</option>
                    <option value="running">"Running"</option>
                    <option value="ended">"Ended"</option>
                </select>
                <a id="jobs-csv" class="small-button" download=""
                    href=move || format!("/api/jobs.csv?{}", export.get())
                    title="These jobs as CSV (the newest 1000)">"CSV"</a>
                <a id="jobs-json" class="small-button" download="gpudash-jobs.json"
                    href=move || format!("/api/jobs?{}", export.get())
                    title="These jobs as JSON (the newest 1000; page on with before=)">"JSON"</a>
            </div>
            <JobNoticesPanel />
            <Show when=move || error.with(Option::is_some)>
                <p class="lab-error jobs-error" role="alert">{move || error.get().unwrap_or_default()}</p>
            </Show>
            <Show when=move || answer.with(|a| a.as_ref().is_some_and(|a| a.jobs.is_empty()))>
                <p id="jobs-empty" class="placeholder">
                    "No jobs here yet. A job is a Slurm job, a pod, a container or a process group, from its first \
                     GPU process to its last; it appears as soon as it runs on a GPU."
                </p>
            </Show>
            <Show when=move || view_signal.with(|v| v.job.is_some())>
                <JobDetail id=Signal::derive(move || view_signal.with(|v| v.job.unwrap_or(0))) tick=tick />
            </Show>
            <table id="jobs-table" class="usage-table sortable jobs-table">
                <caption class="visually-hidden">"Jobs, newest first"</caption>
                <thead>
                    <tr>
                        {Column::ALL
                            .into_iter()
                            .map(|(column, label)| view! {
                                <th scope="col" aria-sort=move || aria(column)>
                                    <button type="button" class="sort-button" on:click=move |_| click(column)>
                                        {label}
                                    </button>
                                </th>
                            })
                            .collect_view()}
                    </tr>
                </thead>
                <tbody>
                    <For each=rows key=|r| (r.job.id, r.job.last_seen_ms) let:r>
                        {
                            let id = r.job.id;
                            let f = r.job.figures.clone();
                            let first = r.verdicts.first().map(|v| v.words.clone()).unwrap_or_default();
                            let running = r.job.ended_ms.is_none();
                            view! {
                                <tr class="job-row" class:running=running data-job=id.to_string()>
                                    <td>{format::stamp(r.job.started_ms as f64)}</td>
                                    <td class="col-name">
                                        <a href=format!("#jobs?job={id}") on:click=move |ev| {
                                            ev.prevent_default();
                                            open(id);
                                        }>{r.job.name.clone()}</a>
                                        <span class="job-runtime">{format!(" {} · GPU {}", r.job.runtime.name(), format::indexes(&r.job.gpus))}</span>
                                    </td>
                                    <td class="col-name">{r.job.owner.clone()}</td>
                                    <td>{length(&r)}</td>
                                    <td>{format!("{:.2}", f.held_s / 3600.0)}</td>
                                    <td>{share(f.sm_active_mean)}</td>
                                    <td>{format!("{:.0}%", f.idle_share() * 100.0)}</td>
                                    <td>{gib(f.memory_peak_bytes as f64)}</td>
                                    <td>{format!("{:.3}", r.energy_kwh)}</td>
                                    <td class=format!("col-name job-grade grade-{}", r.grade.name())>
                                        <span class="grade">{grade_word(r.grade)}</span>" "{first}
                                    </td>
                                </tr>
                            }
                        }
                    </For>
                </tbody>
            </table>
            <Show when=move || answer.with(|a| a.as_ref().is_some_and(|a| a.more))>
                <p class="hint">"The newest 100 are shown; narrow the filters, or export the newest 1000 as CSV or JSON \
                     (GET /api/jobs pages further back with before=)."</p>
            </Show>
            <p class="hint">
                {move || format!(
                    "{}. Activity is GPM's SM and tensor activity over the time the job held each GPU; on a GPU shared \
                     with another job it is the job's SM share of the GPU's. Jobs shorter than the server's \
                     --job-verdict-after get no verdict.",
                    format::zone_caption()
                )}
            </p>
        </main>
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use shared::jobs::{Job, JobFigures, Outcome};

    fn report(id: u64, owner: &str, sm: Option<f64>, grade: Grade) -> JobReport {
        JobReport {
            job: Job {
                id,
                key: String::new(),
                name: format!("job {id}"),
                owner: owner.to_owned(),
                runtime: Runtime::Process,
                gpus: vec![0],
                started_ms: id,
                watched_from_ms: id,
                last_seen_ms: id + 10,
                ended_ms: None,
                outcome: Outcome::Running,
                figures: JobFigures { sm_active_mean: sm, ..JobFigures::default() },
                series: Vec::new(),
                pids: Vec::new(),
            },
            verdicts: Vec::new(),
            grade,
            energy_kwh: 0.0,
            cost: None,
            co2_kg: None,
        }
    }

    #[test]
    fn columns_sort_by_number_or_name_and_unknown_activity_sorts_last() {
        let jobs = vec![
            report(1, "bo", Some(0.5), Grade::Good),
            report(2, "Ana", None, Grade::Poor),
            report(3, "cy", Some(0.9), Grade::Hint),
        ];
        let ids = |v: Vec<JobReport>| v.iter().map(|r| r.job.id).collect::<Vec<_>>();
        assert_eq!(ids(sorted(jobs.clone(), None)), [1, 2, 3]);
        assert_eq!(ids(sorted(jobs.clone(), Some((Column::SmActivity, true)))), [3, 1, 2]);
        assert_eq!(ids(sorted(jobs.clone(), Some((Column::Owner, false)))), [2, 1, 3]);
        assert_eq!(ids(sorted(jobs, Some((Column::Verdict, true)))), [2, 3, 1]);
    }

    #[test]
    fn the_filters_make_the_query() {
        let view =
            JobsView { owner: Some("ana".into()), runtime: Some(Runtime::Pod), running: Some(false), job: Some(3) };
        assert_eq!(query_of(&view, false).query_string(), "limit=100&owner=ana&runtime=pod&state=ended");
        assert_eq!(query_of(&view, true).limit, 1000);
    }
}
