//! A job opened on the Jobs tab (`#job-detail`): its verdicts with the figures behind them, what it
//! used, and its own SM and tensor activity over its life as an SVG chart.

use leptos::{prelude::*, task::spawn_local};
use shared::jobs::{Grade, JobPoint, JobReport};

use crate::{
    components::format,
    hooks::{api::get_json, session::Session, url::ViewSignals},
};

pub fn share(value: Option<f64>) -> String {
    value.map_or_else(format::na, |v| format!("{:.0}%", v * 100.0))
}

pub fn gib(bytes: f64) -> String {
    shared::units::format_bytes(bytes.max(0.0) as u64)
}

pub fn grade_word(grade: Grade) -> &'static str {
    match grade {
        Grade::Unjudged => "too short",
        _ => grade.name(),
    }
}

pub fn length(r: &JobReport) -> String {
    let text = shared::time::duration(r.job.length_ms());
    if r.job.ended_ms.is_none() { format!("{text} so far") } else { text }
}

/// `#job-detail`: the job opened, its verdicts, figures and activity chart.
#[component]
pub fn JobDetail(id: Signal<u64>, tick: RwSignal<u32>) -> impl IntoView {
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
}
