//! `#jobs`: running and recent jobs (each workload from its first GPU process to its last), a
//! table filtered by owner, runtime and state and sorted on a click, and the job opened
//! (`#jobs?job=12`, a deep link): its verdicts with the figures behind them, what it used, and
//! its own activity over its life. The figures and the verdict rules are `shared::jobs`'; the
//! page asks `GET /api/jobs` (refreshed every 10 s while shown) and `GET /api/jobs/{id}`.

use leptos::{prelude::*, task::spawn_local};
use shared::jobs::{Grade, JobPoint, JobReport, JobsQuery, JobsResponse, Runtime};

use crate::{
    components::format,
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

fn share(value: Option<f64>) -> String {
    value.map_or_else(format::na, |v| format!("{:.0}%", v * 100.0))
}

fn gib(bytes: f64) -> String {
    shared::units::format_bytes(bytes.max(0.0) as u64)
}

fn grade_word(grade: Grade) -> &'static str {
    match grade {
        Grade::Unjudged => "too short",
        _ => grade.name(),
    }
}

fn length(r: &JobReport) -> String {
    let text = shared::time::duration(r.job.length_ms());
    if r.job.ended_ms.is_none() { format!("{text} so far") } else { text }
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

/// `#job-detail`: the job opened, its verdicts, figures and activity chart.
#[component]
fn JobDetail(id: Signal<u64>, tick: RwSignal<u32>) -> impl IntoView {
    let session = expect_context::<Session>();
    let view_signal = expect_context::<ViewSignals>().jobs;
    let report = RwSignal::new(None::<JobReport>);
    let error = RwSignal::new(None::<String>);
    let asked = StoredValue::new(0u64);
    Effect::new(move |_| {
        let id = id.get();
        tick.track();
        asked.update_value(|n| *n += 1);
        let this = asked.get_value();
        spawn_local(async move {
            let got = get_json::<JobReport>(&format!("/api/jobs/{id}")).await;
            if asked.try_get_value() != Some(this) {
                return;
            }
            match got {
                Ok(r) => {
                    report.try_set(Some(r));
                    error.try_set(None);
                }
                Err(failure) => {
                    report.try_set(None);
                    error.try_set(Some(failure.message.clone()));
                    session.unauthorized(&failure);
                }
            }
        });
    });
    let close = move |_| view_signal.update(|v| v.job = None);
    view! {
        <section id="job-detail" class="job-detail" aria-labelledby="job-detail-title">
            <div class="usage-table-head">
                <h3 id="job-detail-title">
                    {move || report.with(|r| r.as_ref().map_or_else(
                        || format!("Job {}", id.get()),
                        |r| format!("Job {}: {}", r.job.id, r.job.name),
                    ))}
                </h3>
                <a class="small-button" download="" href=move || format!("/api/jobs/{}", id.get())>"JSON"</a>
                <button type="button" class="small-button" on:click=close>"Close"</button>
            </div>
            <Show when=move || error.with(Option::is_some)>
                <p class="lab-error" role="alert">{move || error.get().unwrap_or_default()}</p>
            </Show>
            {move || report.get().map(|r| view! { <JobFacts report=r /> })}
        </section>
    }
}

#[component]
fn JobFacts(report: JobReport) -> impl IntoView {
    let j = &report.job;
    let f = &j.figures;
    let ended = j.ended_ms.map_or_else(|| "running".to_owned(), |e| format::stamp(e as f64));
    let watched = (j.watched_from_ms > j.started_ms).then(|| {
        format!(
            "Figures since gpudash first saw it, {} (it started {}).",
            format::stamp(j.watched_from_ms as f64),
            format::stamp(j.started_ms as f64)
        )
    });
    let shared_note = (f.shared_s > 0.0).then(|| {
        format!(
            "For {:.0}% of its time it shared a GPU with another job: over that time its activity is its SM share of the GPU's.",
            f.shared_share() * 100.0
        )
    });
    let mut facts: Vec<(&str, String)> = vec![
        ("Owner", j.owner.clone()),
        ("Runtime", j.runtime.name().to_owned()),
        ("GPUs", format::indexes(&j.gpus)),
        ("Started", format::stamp(j.started_ms as f64)),
        ("Ended", ended),
        ("Outcome", j.outcome.describe().to_owned()),
        ("Length", length(&report)),
        ("GPU-hours held", format!("{:.3}", f.held_s / 3600.0)),
        ("GPU-hours charged", format!("{:.3}", f.gpu_s / 3600.0)),
        ("Idle", format!("{:.0}% ({:.3} GPU-hours)", f.idle_share() * 100.0, f.idle_s / 3600.0)),
        ("SM activity", format!("{} mean, {} p95", share(f.sm_active_mean), share(f.sm_active_p95))),
        ("Tensor activity", share(f.tensor_active_mean)),
        ("DRAM activity", share(f.dram_active_mean)),
        (
            "Memory",
            format!(
                "{} peak, {} mean, of {}",
                gib(f.memory_peak_bytes as f64),
                gib(f.memory_mean_bytes),
                gib(f.memory_capacity_bytes as f64)
            ),
        ),
        ("Energy", format!("{:.3} kWh", report.energy_kwh)),
    ];
    if let Some(cost) = &report.cost {
        facts.push(("Cost", cost.clone()));
    }
    if let Some(co2) = report.co2_kg {
        facts.push(("CO2e", format!("{co2:.2} kg")));
    }
    let verdicts = report.verdicts.clone();
    let series = j.series.clone();
    view! {
        <ul id="job-verdicts" class="job-verdicts">
            {verdicts
                .into_iter()
                .map(|v| {
                    let evidence = v
                        .evidence
                        .iter()
                        .map(|e| format!("{}: {}", e.name, e.value))
                        .collect::<Vec<_>>()
                        .join(" · ");
                    view! {
                        <li class=format!("job-verdict grade-{}", v.grade.name()) data-rule=v.rule>
                            <span class="grade">{grade_word(v.grade)}</span>" "{v.words}
                            <span class="job-evidence">{evidence}</span>
                        </li>
                    }
                })
                .collect_view()}
        </ul>
        <dl id="job-figures" class="job-figures">
            {facts.into_iter().map(|(k, v)| view! { <dt>{k}</dt><dd>{v}</dd> }).collect_view()}
        </dl>
        {watched.map(|w| view! { <p class="hint">{w}</p> })}
        {shared_note.map(|w| view! { <p class="hint">{w}</p> })}
        <ActivityChart series=series />
    }
}

/// The chart's size in SVG units.
const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 160.0;

/// `points` of one figure (0–1) as an SVG polyline's points; gaps where a step has none.
pub fn polyline(series: &[JobPoint], pick: fn(&JobPoint) -> Option<f64>) -> Vec<String> {
    let (Some(first), Some(last)) = (series.first(), series.last()) else { return Vec::new() };
    let span = (last.at_ms.saturating_sub(first.at_ms)).max(1) as f64;
    let mut lines = vec![String::new()];
    for p in series {
        match pick(p) {
            Some(v) => {
                let x = (p.at_ms - first.at_ms) as f64 / span * WIDTH;
                let y = HEIGHT - v.clamp(0.0, 1.0) * HEIGHT;
                let line = lines.last_mut().expect("never empty");
                if !line.is_empty() {
                    line.push(' ');
                }
                line.push_str(&format!("{x:.1},{y:.1}"));
            }
            None if lines.last().is_some_and(|l| !l.is_empty()) => lines.push(String::new()),
            None => {}
        }
    }
    lines.retain(|l| !l.is_empty());
    lines
}

/// `#job-activity`: the job's own SM and tensor activity over its life, 0–100%.
#[component]
fn ActivityChart(series: Vec<JobPoint>) -> impl IntoView {
    if series.len() < 2 {
        return view! { <p class="placeholder">"Its activity chart appears after its first minute."</p> }.into_any();
    }
    let (start, end) = (series[0].at_ms, series[series.len() - 1].at_ms);
    let description =
        format!("SM and tensor activity from {} to {}", format::stamp(start as f64), format::stamp(end as f64));
    let label = description.clone();
    let sm = polyline(&series, |p| p.sm_active);
    let tensor = polyline(&series, |p| p.tensor_active);
    view! {
        <figure id="job-activity" class="job-activity usage-chart">
            <svg viewBox=format!("-40 -10 {} {}", WIDTH + 50.0, HEIGHT + 30.0) role="img" aria-label=label>
                <title>{description}</title>
                {[0.0, 0.5, 1.0].into_iter().map(|v| {
                    let y = HEIGHT - v * HEIGHT;
                    view! {
                        <line class="usage-grid" x1="0" x2=WIDTH.to_string() y1=y.to_string() y2=y.to_string() />
                        <text x="-6" y=(y + 4.0).to_string() text-anchor="end">{format!("{:.0}%", v * 100.0)}</text>
                    }
                }).collect_view()}
                {sm.into_iter().map(|points| view! { <polyline class="job-line sm" points=points /> }).collect_view()}
                {tensor.into_iter().map(|points| view! { <polyline class="job-line tensor" points=points /> }).collect_view()}
                <text x="0" y=(HEIGHT + 18.0).to_string()>{format::stamp(start as f64)}</text>
                <text x=WIDTH.to_string() y=(HEIGHT + 18.0).to_string() text-anchor="end">{format::stamp(end as f64)}</text>
            </svg>
            <figcaption class="usage-legend">
                <span class="usage-legend-item"><span class="swatch job-swatch sm"></span>"SM activity"</span>
                <span class="usage-legend-item"><span class="swatch job-swatch tensor"></span>"Tensor activity"</span>
            </figcaption>
        </figure>
    }
    .into_any()
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
    fn the_chart_breaks_its_line_where_a_step_has_no_figure() {
        let p = |at_ms, sm| JobPoint { at_ms, sm_active: sm, ..JobPoint::default() };
        let lines =
            polyline(&[p(0, Some(0.0)), p(10, Some(1.0)), p(20, None), p(30, Some(0.5)), p(40, Some(0.5))], |p| {
                p.sm_active
            });
        assert_eq!(lines, ["0.0,160.0 150.0,0.0", "450.0,80.0 600.0,80.0"]);
        assert!(polyline(&[], |p| p.sm_active).is_empty());
    }

    #[test]
    fn the_filters_make_the_query() {
        let view =
            JobsView { owner: Some("ana".into()), runtime: Some(Runtime::Pod), running: Some(false), job: Some(3) };
        assert_eq!(query_of(&view, false).query_string(), "limit=100&owner=ana&runtime=pod&state=ended");
        assert_eq!(query_of(&view, true).limit, 1000);
    }
}
