//! A run's chart as an SVG: the chart the page draws on its canvas
//! ([`shared::chart`]), here on plotters' SVG backend in the page's light theme,
//! with a title and a legend naming the curves (the page shows both beside it).

use plotters::prelude::{IntoDrawingArea, SVGBackend, Text};
use shared::chart::{DrawError, Look, Palette, RunChart};
use shared::lab::Run;

const SIZE: (u32, u32) = (960, 540);

/// The SVG text of `run`'s chart, the previous run on the same GPU overlaid in
/// lighter lines; a run without a result gets a one-line placeholder.
pub fn chart(run: &Run, previous: Option<&Run>) -> String {
    let mut svg = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(&root, run, previous)
    };
    if let Err(e) = drawn {
        tracing::warn!(run = run.summary.id, "chart failed: {e}");
    }
    svg
}

type Area<'a> = plotters::drawing::DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw(root: &Area<'_>, run: &Run, previous: Option<&Run>) -> Result<(), DrawError> {
    let title = format!(
        "{} on GPU {} ({}) — run {}",
        run.summary.kind.name(),
        run.summary.device,
        run.environment.gpu_name,
        run.summary.id,
    );
    let look = Look { scale: 1.0, width: f64::from(SIZE.0), palette: Palette::LIGHT };
    let Some(result) = &run.result else {
        root.fill(&look.palette.background)?;
        let status = format!("\"{}\"", run.summary.status.as_str());
        let simulated = if run.summary.simulated { " — SIMULATED" } else { "" };
        let text = format!("{title}{simulated}: no result ({status})");
        root.draw(&Text::new(text, (20, 40), ("sans-serif", 20)))?;
        root.present()?;
        return Ok(());
    };
    let previous = previous.and_then(|p| Some((p.summary.id, p.result.as_ref()?)));
    let chart = RunChart {
        result,
        previous: previous.map(|(_, result)| result),
        previous_id: previous.map(|(id, _)| id),
        simulated: run.summary.simulated,
        title: Some(&title),
    };
    chart.draw_with_legend(root, &look)
}

#[cfg(test)]
mod tests {
    use shared::lab::{
        ChartSpec, ExperimentKind, ExperimentParams, Figure, Matrix, Point, ReferenceLine, RunEnvironment, RunPlan,
        RunResult, RunStatus, RunSummary, Series, Stats, TimelineSpan,
    };

    use super::*;

    fn run(id: u64, result: Option<RunResult>) -> Run {
        Run {
            summary: RunSummary {
                id,
                device: 0,
                devices: vec![0],
                kind: ExperimentKind::named("transfer"),
                status: if result.is_some() { RunStatus::Succeeded } else { RunStatus::Failed },
                requested_by: "t".into(),
                submitted_ms: id,
                started_ms: None,
                finished_ms: None,
                simulated: true,
                passed: None,
                error: None,
            },
            params: ExperimentParams::defaults(ExperimentKind::named("transfer")),
            force: false,
            forced_by_admin: false,
            plan: RunPlan::default(),
            environment: RunEnvironment { gpu_name: "Sim H100".into(), ..RunEnvironment::default() },
            progress: None,
            result,
            previous_id: None,
            takeaway: None,
        }
    }

    fn result(chart: ChartSpec) -> RunResult {
        let stats = |median: f64| Stats { median, min: median * 0.9, max: median * 1.1, n: 5 };
        RunResult {
            chart,
            unit: "GB/s".into(),
            series: vec![Series {
                name: "h2d_pinned".into(),
                points: (12..=20).map(|p| Point { x: f64::from(1u32 << p), y: stats(f64::from(p)) }).collect(),
            }],
            references: vec![ReferenceLine { name: "PCIe peak".into(), value: 63.0 }],
            figures: vec![Figure { name: "launch".into(), unit: "µs".into(), stats: stats(4.2) }],
            checks: vec![],
            memory_steps: vec![],
            timeline: vec![TimelineSpan {
                phase: "overlap".into(),
                stream: 1,
                label: "kernel 3".into(),
                start_ms: 0.5,
                end_ms: 2.0,
            }],
            matrices: vec![Matrix {
                name: "bidirectional, peer access disabled".into(),
                unit: "GB/s".into(),
                devices: vec![0, 1],
                cells: vec![vec![None, Some(40.0)], vec![Some(38.5), None]],
                higher_is_better: true,
            }],
            notes: vec![],
            l2_bytes: None,
        }
    }

    #[test]
    fn curves_name_their_series_and_the_previous_run() {
        let lines =
            || result(ChartSpec::Lines { x_label: "bytes".into(), y_label: "GB/s".into(), log_x: true, log_y: false });
        let svg = chart(&run(7, Some(lines())), Some(&run(3, Some(lines()))));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"), "{svg:.200}");
        for text in [
            "transfer on GPU 0 (Sim H100) — run 7",
            "SIMULATED",
            "h2d_pinned",
            "(run 3)",
            "PCIe peak 63.0 GB/s",
            "4 KiB",
        ] {
            assert!(svg.contains(text), "no '{text}' in the SVG");
        }
    }

    #[test]
    fn sizes_that_fit_in_l2_are_marked_when_any_do() {
        let lines = |l2_bytes| RunResult {
            l2_bytes,
            ..result(ChartSpec::Lines { x_label: "bytes".into(), y_label: "GB/s".into(), log_x: true, log_y: true })
        };
        let marked = chart(&run(1, Some(lines(Some(256 << 10)))), None);
        assert!(marked.contains("src + dst fit in L2 (256 KiB)"), "{marked:.3000}");
        for l2_bytes in [None, Some(2048)] {
            let svg = chart(&run(1, Some(lines(l2_bytes))), None);
            assert!(svg.contains("h2d_pinned") && !svg.contains(shared::chart::L2_LABEL), "{l2_bytes:?}");
        }
        let above = chart(&run(1, Some(lines(Some(4 << 20)))), None);
        assert!(above.contains("src + dst fit in L2 (4 MiB)"), "every size fits: the band spans the chart");
    }

    #[test]
    fn every_kind_draws_and_a_run_without_result_says_why() {
        for spec in [
            ChartSpec::Bars { y_label: "µs".into() },
            ChartSpec::Gantt,
            ChartSpec::Heatmap { row_label: "from".into(), col_label: "to".into() },
        ] {
            let svg = chart(&run(1, Some(result(spec.clone()))), None);
            assert!(svg.contains("</svg>") && svg.contains("<rect"), "{spec:?}: {svg:.300}");
        }
        let heatmap =
            chart(&run(1, Some(result(ChartSpec::Heatmap { row_label: "a".into(), col_label: "b".into() }))), None);
        assert!(heatmap.contains("bidirectional, peer access disabled") && heatmap.contains("38.5"));
        let failed = chart(&run(2, None), None);
        assert!(
            failed.contains("no result (&quot;failed&quot;)") || failed.contains("no result (\"failed\")"),
            "{failed}"
        );
    }
}
