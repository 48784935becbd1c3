//! `#lab-run`: one run in full. Its progress while it runs; once it ends, its
//! chart (with the previous run overlaid), figures, checks and notes, and the
//! links to the server's SVG and CSV.

use leptos::{html, logging, prelude::*, task::spawn_local};
use shared::{
    lab::{ChartSpec, ExperimentKind, RunResult, RunStatus},
    lab_view::RunDoc,
    units::three_digits,
};

use super::{
    chart::{self, SERIES_COLORS, span_kind},
    pytorch::{InPyTorch, Takeaway},
    status_class, status_label,
};
use crate::{
    components::{
        chart::use_resize_counter,
        format::{self, duration},
    },
    hooks::{
        lab::{Lab, fetch_run},
        theme::Theme,
    },
    pages::Tab,
    state::lab::note_parts,
};

/// The selected run, or a hint to pick one.
#[component]
pub fn RunView(theme: ReadSignal<Theme>) -> impl IntoView {
    let lab = expect_context::<Lab>();
    move || match lab.selected.get() {
        Some(id) => view! { <RunDetails id=id theme=theme /> }.into_any(),
        None => view! {
            <section id="lab-run" class="lab-panel run-view">
                <p class="lab-empty">"Run an experiment, or pick one of the recent runs, to see its result here."</p>
            </section>
        }
        .into_any(),
    }
}

#[component]
fn RunDetails(id: u64, theme: ReadSignal<Theme>) -> impl IntoView {
    let lab = expect_context::<Lab>();
    let run = RwSignal::new(None::<RunDoc>);
    let previous = RwSignal::new(None::<RunDoc>);
    let error = RwSignal::new(None::<String>);
    let status = Memo::new(move |_| lab.state.with(|s| s.run_status(id)));
    let generation = StoredValue::new(0u32);
    // Fetched again at each change of state: queued, running, then its result.
    Effect::new(move |_| {
        status.track();
        generation.update_value(|g| *g += 1);
        let mine = generation.get_value();
        spawn_local(async move {
            let answer = fetch_run(id).await;
            if generation.try_get_value() != Some(mine) {
                return;
            }
            match answer {
                Ok(fetched) => {
                    let wanted = fetched.previous_id;
                    let have = previous.try_with_untracked(|p| p.as_ref().map(|p| p.id)).flatten();
                    if let Some(prev) = wanted.filter(|p| Some(*p) != have) {
                        match fetch_run(prev).await {
                            Ok(p) => drop(previous.try_set(Some(p))),
                            Err(e) => logging::warn!("gpudash: previous run {prev}: {}", e.message),
                        }
                    }
                    error.try_set(None);
                    run.try_set(Some(fetched));
                }
                Err(failure) => drop(error.try_set(Some(failure.message))),
            }
        });
    });

    let progress = Memo::new(move |_| lab.state.with(|s| s.queue_entry(id).and_then(|e| e.progress.clone())));
    let summary = move || run.with(|r| r.as_ref().map(|r| r.summary()));
    let live_status = move || status.get().or_else(|| summary().map(|s| s.status));
    let result = Memo::new(move |_| run.with(|r| r.as_ref().and_then(|r| r.result.clone())));
    let simulated = move || summary().is_some_and(|s| s.simulated);

    view! {
        <section id="lab-run" class="lab-panel run-view" data-run=id>
            <header class="run-head">
                <h3 class="lab-panel-title">
                    {move || summary().map_or_else(|| format!("Run #{id}"), |s| format!("Run #{id} · {} on {}", s.kind.name(), s.gpus_label()))}
                </h3>
                {move || live_status().map(|s| view! { <span class=status_class(s)>{status_label(s)}</span> })}
                <Show when=simulated>
                    <span class="badge badge-simulated" title="Figures come from the simulated executor, not a GPU">
                        "SIMULATED"
                    </span>
                </Show>
                {move || summary().and_then(|s| s.passed).map(|passed| view! {
                    <span class="run-passed" class:pass=passed class:fail=!passed>
                        {if passed { "all checks passed" } else { "checks failed" }}
                    </span>
                })}
            </header>
            {move || run.with(|r| r.as_ref().map(run_facts))}
            <Show when=move || matches!(live_status(), Some(RunStatus::Queued | RunStatus::Running))>
                <div class="run-progress">
                    <progress max="100" value=move || progress.with(|p| format!("{:.0}", p.as_ref().map_or(0.0, |p| p.fraction * 100.0)))></progress>
                    <span class="progress-percent">
                        {move || progress.with(|p| format!("{:.0}%", p.as_ref().map_or(0.0, |p| p.fraction * 100.0)))}
                    </span>
                    <span class="progress-message">
                        {move || progress.with(|p| p.as_ref().map(|p| p.message.clone())).unwrap_or_else(|| "waiting in the queue".into())}
                    </span>
                </div>
            </Show>
            <Show when=move || error.with(Option::is_some)>
                <p class="lab-error">{move || error.get().unwrap_or_default()}</p>
            </Show>
            {move || summary().and_then(|s| s.error).map(|e| view! { <p class="run-error">{format::server_text(&e)}</p> })}
            {move || run.with(|r| r.as_ref().filter(|r| !r.plan.notes.is_empty()).map(|r| view! {
                <ul class="run-plan">{r.plan.notes.iter().map(|n| view! { <li>{n.clone()}</li> }).collect_view()}</ul>
            }))}
            {move || {
                let (kind, takeaway) = run.with(|r| r.as_ref().map(|r| (r.kind.clone(), r.takeaway.clone())))?;
                result.get().map(|result| view! {
                    <RunResultView id=id kind=kind result=result takeaway=takeaway previous=previous simulated=simulated() theme=theme />
                })
            }}
        </section>
    }
}

/// Who asked, when, and where it ran.
fn run_facts(run: &RunDoc) -> impl IntoView + use<> {
    let s = run;
    let env = &run.environment;
    let took = match (s.started_ms, s.finished_ms) {
        (Some(a), Some(b)) => {
            format!(" · took {}", if b - a < 1000 { format!("{} ms", b - a) } else { duration(b - a) })
        }
        _ => String::new(),
    };
    let text = format!(
        "asked by {} at {}{took} · {} · driver {} · CUDA {} · {}",
        s.requested_by,
        format::stamp(s.submitted_ms as f64),
        if env.gpu_name.is_empty() { "GPU" } else { &env.gpu_name },
        env.driver_version.as_deref().unwrap_or("n/a"),
        env.cuda_driver_version.as_deref().unwrap_or("n/a"),
        env.hostname,
    );
    view! { <p class="run-facts">{text}</p> }
}

#[component]
fn RunResultView(
    id: u64,
    kind: ExperimentKind,
    result: RunResult,
    takeaway: Option<String>,
    previous: RwSignal<Option<RunDoc>>,
    simulated: bool,
    theme: ReadSignal<Theme>,
) -> impl IntoView {
    let canvas_ref = NodeRef::<html::Canvas>::new();
    let resized = use_resize_counter();
    let height = chart_height(&result);
    let drawn = StoredValue::new(result.clone());
    let mut draws = 0u32;
    // A canvas in a hidden tab has no size: draw again when the Lab tab is shown.
    let shown = use_context::<ReadSignal<Tab>>().map(|tab| Memo::new(move |_| tab.get() == Tab::Lab));
    Effect::new(move |_| {
        theme.track();
        resized.track();
        if let Some(shown) = shown
            && !shown.get()
        {
            return;
        }
        let Some(canvas) = canvas_ref.get() else { return };
        let outcome = previous.with(|p| {
            let previous = p.as_ref().and_then(|p| p.result.as_ref());
            drawn.with_value(|result| chart::draw(&canvas, result, previous, simulated))
        });
        match outcome {
            Ok(()) => {
                draws += 1;
                let _ = canvas.set_attribute("data-draws", &draws.to_string());
            }
            Err(err) => logging::warn!("gpudash: cannot draw run {id}: {err}"),
        }
    });
    let legend = legend(&result);
    let has_previous = move || previous.with(|p| p.as_ref().is_some_and(|p| p.result.is_some()));
    let previous_id = move || previous.with(|p| p.as_ref().map(|p| p.id).unwrap_or_default());
    let previous_median = move |name: &str| {
        previous.with(|p| {
            p.as_ref()
                .and_then(|p| p.result.as_ref())
                .and_then(|r| r.figures.iter().find(|f| f.name == name))
                .map(|f| f.stats.median)
        })
    };
    let figures = result.figures.clone();
    view! {
        <div class="run-result">
            {takeaway.map(|line| view! { <Takeaway line=line /> })}
            <canvas
                node_ref=canvas_ref
                class="lab-chart"
                data-run=id
                style:height=format!("{height}px")
                role="img"
                aria-label=format!("Chart of run {id}")
            ></canvas>
            <ul class="lab-legend">
                {legend.into_iter().map(|(name, color)| view! {
                    <li><span class="legend-swatch" style:background=color></span>{name}</li>
                }).collect_view()}
                <Show when=has_previous>
                    <li class="legend-previous">{move || format!("faint: previous run #{}", previous_id())}</li>
                </Show>
            </ul>
            <InPyTorch kind=kind open=true />
            <ul class="lab-notes">
                {result.notes.iter().map(|note| {
                    let key = note.contains("zero page");
                    match note_parts(note) {
                        (whole, None) => view! { <li class="lab-note" class:lab-note-key=key>{whole}</li> }.into_any(),
                        (first, Some(rest)) => view! {
                            <li class="lab-note lab-note-long" class:lab-note-key=key>
                                <details>
                                    <summary>{first}</summary>
                                    <p>{rest}</p>
                                </details>
                            </li>
                        }
                        .into_any(),
                    }
                }).collect_view()}
            </ul>
            <div class="table-scroll">
                <table class="lab-figures">
                    <thead>
                        <tr>
                            <th>"Figure"</th>
                            <th class="num">"Median"</th>
                            <th class="num" title="The figure's smallest value over the repetitions: for a time the fastest, for a bandwidth the slowest">"Min"</th>
                            <th class="num" title="The figure's largest value over the repetitions: for a time the slowest, for a bandwidth the fastest">"Max"</th>
                            <th class="num">"n"</th>
                            <th>"Unit"</th>
                            <th class="num">"Previous"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {figures.into_iter().map(|f| {
                            let name = f.name.clone();
                            view! {
                                <tr class="lab-figure">
                                    <td>{f.name}</td>
                                    <td class="num">{three_digits(f.stats.median)}</td>
                                    <td class="num">{three_digits(f.stats.min)}</td>
                                    <td class="num">{three_digits(f.stats.max)}</td>
                                    <td class="num">{f.stats.n}</td>
                                    <td>{f.unit}</td>
                                    <td class="num">{move || previous_median(&name).map(three_digits).unwrap_or_default()}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            </div>
            {(!result.checks.is_empty()).then(|| view! {
                <ul class="lab-checks">
                    {result.checks.iter().map(|c| view! {
                        <li class="check" class:pass=c.passed class:fail=!c.passed>
                            <span class="check-mark">{if c.passed { "✓ pass" } else { "✗ fail" }}</span>
                            " " <span class="check-name">{c.name.clone()}</span>
                            " — " <span class="check-detail">{c.detail.clone()}</span>
                        </li>
                    }).collect_view()}
                </ul>
            })}
            <p class="run-links">
                <a class="run-svg" href=format!("/api/runs/{id}/chart.svg") target="_blank" rel="noopener">"chart.svg"</a>
                " · "
                <a class="run-csv" href=format!("/api/runs/{id}/results.csv") download=format!("run-{id}.csv")>"results.csv"</a>
            </p>
        </div>
    }
}

/// Canvas height in CSS pixels: timelines and bars grow with their rows.
fn chart_height(result: &RunResult) -> u32 {
    match &result.chart {
        ChartSpec::Lines { .. } => 340,
        ChartSpec::Bars { .. } => (result.figures.len() as u32 * 34 + 70).max(160),
        ChartSpec::Gantt => {
            let mut rows: Vec<(&str, u32)> = result.timeline.iter().map(|s| (s.phase.as_str(), s.stream)).collect();
            shared::order::sort(&mut rows);
            rows.dedup();
            (rows.len() as u32 * 26 + 80).max(160)
        }
        ChartSpec::Heatmap { .. } => {
            let n = result.matrices.iter().map(|m| m.devices.len()).max().unwrap_or(2) as u32;
            (result.matrices.len().div_ceil(2) as u32) * (n * 44 + 90)
        }
    }
}

/// Names and colors under the chart: the series, or the timeline's kinds of bar.
fn legend(result: &RunResult) -> Vec<(String, &'static str)> {
    let color = |i: usize| SERIES_COLORS[i % SERIES_COLORS.len()];
    match &result.chart {
        ChartSpec::Lines { .. } => result.series.iter().enumerate().map(|(i, s)| (s.name.clone(), color(i))).collect(),
        ChartSpec::Gantt => {
            let mut kinds: Vec<&str> = Vec::new();
            for span in &result.timeline {
                let kind = span_kind(&span.label);
                if !kinds.contains(&kind) {
                    kinds.push(kind);
                }
            }
            kinds.into_iter().enumerate().map(|(i, k)| (k.to_owned(), color(i))).collect()
        }
        ChartSpec::Bars { .. } | ChartSpec::Heatmap { .. } => Vec::new(),
    }
}
