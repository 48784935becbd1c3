//! A run's chart drawn on the server with plotters' SVG backend, the previous
//! run on the same GPU overlaid in lighter lines.

use plotters::prelude::*;
use shared::lab::{ChartSpec, Run, RunResult};
use shared::units::format_bytes;

const SIZE: (u32, u32) = (960, 540);

/// The SVG text of `run`'s chart; a run without a result gets a one-line placeholder.
pub fn chart(run: &Run, previous: Option<&Run>) -> String {
    let mut svg = String::new();
    let title = format!(
        "{} on GPU {} ({}) — run {}{}",
        run.summary.kind.name(),
        run.summary.device,
        run.environment.gpu_name,
        run.summary.id,
        if run.summary.simulated { " — SIMULATED" } else { "" }
    );
    let drawn = {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(&root, &title, run, previous.and_then(|p| p.result.as_ref().map(|r| (p.summary.id, r))))
            .and_then(|()| root.present().map_err(|e| e.to_string()))
    };
    if let Err(e) = drawn {
        tracing::warn!(run = run.summary.id, "chart failed: {e}");
    }
    svg
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw(root: &Area<'_>, title: &str, run: &Run, previous: Option<(u64, &RunResult)>) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let Some(result) = &run.result else {
        let status = format!("\"{}\"", run.summary.status.as_str());
        let text = format!("{title}: no result ({status})");
        root.draw(&Text::new(text, (20, 40), ("sans-serif", 20))).map_err(|e| e.to_string())?;
        return Ok(());
    };
    match &result.chart {
        ChartSpec::Lines { x_label, y_label, log_x, log_y } => {
            lines(root, title, result, previous, (x_label, y_label), (*log_x, *log_y))
        }
        ChartSpec::Bars { y_label } => bars(root, title, result, y_label),
        ChartSpec::Gantt => gantt(root, title, result),
        ChartSpec::Heatmap { row_label, col_label } => heatmaps(root, title, result, (row_label, col_label)),
    }
}

fn axis(v: f64, log: bool) -> f64 {
    if log { v.max(1e-12).log10() } else { v }
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.05).max(1e-9);
    (lo - pad, hi + pad)
}

fn lines(
    root: &Area<'_>,
    title: &str,
    r: &RunResult,
    previous: Option<(u64, &RunResult)>,
    (x_label, y_label): (&str, &str),
    (log_x, log_y): (bool, bool),
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let prev_series = previous.map(|(_, p)| p.series.as_slice()).unwrap_or_default();
    let all = r.series.iter().chain(prev_series).flat_map(|s| &s.points);
    let xs = bounds(all.clone().map(|p| axis(p.x, log_x)));
    let ys = bounds(
        all.map(|p| axis(p.y.median, log_y))
            .chain(r.references.iter().map(|l| axis(l.value, log_y)))
            .chain(std::iter::once(if log_y { axis(0.01, true) } else { 0.0 })),
    );
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(xs.0..xs.1, ys.0..ys.1)
        .map_err(e)?;
    let bytes_axis = x_label.contains("bytes");
    let fx = |v: &f64| {
        let raw = if log_x { 10f64.powf(*v) } else { *v };
        if bytes_axis { format_bytes(raw.round() as u64) } else { format!("{raw:.0}") }
    };
    let fy = |v: &f64| {
        let raw = if log_y { 10f64.powf(*v) } else { *v };
        if raw >= 100.0 { format!("{raw:.0}") } else { format!("{raw:.2}") }
    };
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&fx)
        .y_label_formatter(&fy)
        .draw()
        .map_err(e)?;
    for (i, s) in r.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = s.points.iter().map(|p| (axis(p.x, log_x), axis(p.y.median, log_y))).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(e)?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, color.filled()))).map_err(e)?;
        if let Some(prev) = prev_series.iter().find(|p| p.name == s.name) {
            let faint = color.mix(0.35);
            let points: Vec<(f64, f64)> =
                prev.points.iter().map(|p| (axis(p.x, log_x), axis(p.y.median, log_y))).collect();
            let label = format!("{} (run {})", s.name, previous.map_or(0, |p| p.0));
            chart
                .draw_series(LineSeries::new(points, faint.stroke_width(1)))
                .map_err(e)?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], faint.stroke_width(1)));
        }
    }
    for reference in &r.references {
        let y = axis(reference.value, log_y);
        let style = BLACK.mix(0.6).stroke_width(1);
        chart.draw_series(LineSeries::new(vec![(xs.0, y), (xs.1, y)], style)).map_err(e)?;
        let label = format!("{} {:.1}", reference.name, reference.value);
        chart.draw_series(std::iter::once(Text::new(label, (xs.0, y), ("sans-serif", 13)))).map_err(e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(e)
}

fn bars(root: &Area<'_>, title: &str, r: &RunResult, y_label: &str) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let n = r.figures.len().max(1) as f64;
    let top = r.figures.iter().map(|f| f.stats.max).fold(0.0, f64::max).max(1e-9) * 1.15;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(20)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n, 0.0..top)
        .map_err(e)?;
    chart.configure_mesh().disable_x_mesh().disable_x_axis().y_desc(y_label).draw().map_err(e)?;
    for (i, f) in r.figures.iter().enumerate() {
        let x = i as f64;
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(std::iter::once(Rectangle::new([(x + 0.15, 0.0), (x + 0.85, f.stats.median)], color.filled())))
            .map_err(e)?;
        let whisker = vec![(x + 0.5, f.stats.min), (x + 0.5, f.stats.max)];
        chart.draw_series(LineSeries::new(whisker, BLACK.stroke_width(2))).map_err(e)?;
        let label = format!("{}: {:.2} {}", f.name, f.stats.median, f.unit);
        chart
            .draw_series(std::iter::once(Text::new(label, (x + 0.1, f.stats.max + top * 0.03), ("sans-serif", 12))))
            .map_err(e)?;
    }
    Ok(())
}

fn gantt(root: &Area<'_>, title: &str, r: &RunResult) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let mut rows: Vec<(String, u32)> = Vec::new();
    for s in &r.timeline {
        if !rows.iter().any(|(p, st)| *p == s.phase && *st == s.stream) {
            rows.push((s.phase.clone(), s.stream));
        }
    }
    let end = r.timeline.iter().map(|s| s.end_ms).fold(0.0, f64::max).max(1e-6) * 1.05;
    let n = rows.len().max(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(20)
        .build_cartesian_2d(0.0..end, 0.0..n)
        .map_err(e)?;
    chart.configure_mesh().disable_y_mesh().disable_y_axis().x_desc("ms from the phase's start").draw().map_err(e)?;
    for s in &r.timeline {
        let Some(row) = rows.iter().position(|(p, st)| *p == s.phase && *st == s.stream) else { continue };
        let y = n - row as f64 - 1.0;
        let color = if s.label == "copy" { BLUE.mix(0.7) } else { GREEN.mix(0.7) };
        chart
            .draw_series(std::iter::once(Rectangle::new([(s.start_ms, y + 0.2), (s.end_ms, y + 0.8)], color.filled())))
            .map_err(e)?;
    }
    for (row, (phase, stream)) in rows.iter().enumerate() {
        let y = n - row as f64 - 0.15;
        let label = format!("{phase} · stream {stream}");
        chart.draw_series(std::iter::once(Text::new(label, (0.0, y), ("sans-serif", 12)))).map_err(e)?;
    }
    Ok(())
}

/// One heatmap per matrix in a grid, each cell coloured within its own matrix (darker is better) and labelled.
fn heatmaps(root: &Area<'_>, title: &str, r: &RunResult, (row_label, col_label): (&str, &str)) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    root.draw(&Text::new(title.to_owned(), (14, 10), ("sans-serif", 18))).map_err(e)?;
    let body = root.margin(36, 6, 6, 6);
    let columns = r.matrices.len().clamp(1, 3);
    let rows = r.matrices.len().div_ceil(columns).max(1);
    let panels = body.split_evenly((rows, columns));
    for (panel, m) in panels.iter().zip(&r.matrices) {
        let (w, h) = panel.dim_in_pixel();
        let (w, h) = (i32::try_from(w).unwrap_or(0), i32::try_from(h).unwrap_or(0));
        panel.draw(&Text::new(format!("{} ({})", m.name, m.unit), (4, 2), ("sans-serif", 13))).map_err(e)?;
        let n = i32::try_from(m.devices.len().max(1)).unwrap_or(1);
        let (left, top) = (44, 36);
        let cell = ((w - left - 8) / n).min((h - top - 8) / n).max(8);
        let values: Vec<f64> = m.cells.iter().flatten().flatten().copied().collect();
        let (lo, hi) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let axis = format!("{row_label} ↓ · {col_label} →");
        panel.draw(&Text::new(axis, (4, 18), ("sans-serif", 11))).map_err(e)?;
        for (i, device) in (0..).zip(&m.devices) {
            let label = format!("GPU {device}");
            panel.draw(&Text::new(label.clone(), (4, top + i * cell + cell / 2 - 6), ("sans-serif", 11))).map_err(e)?;
            panel.draw(&Text::new(label, (left + i * cell + 4, top - 14), ("sans-serif", 11))).map_err(e)?;
        }
        for (i, row) in (0..).zip(&m.cells) {
            for (j, value) in (0..).zip(row) {
                let (x, y) = (left + j * cell, top + i * cell);
                let color = match value {
                    None => RGBColor(235, 235, 235).to_rgba(),
                    Some(v) => {
                        let t = if hi > lo { (v - lo) / (hi - lo) } else { 1.0 };
                        let good = if m.higher_is_better { t } else { 1.0 - t };
                        BLUE.mix(0.15 + 0.75 * good)
                    }
                };
                panel.draw(&Rectangle::new([(x, y), (x + cell - 2, y + cell - 2)], color.filled())).map_err(e)?;
                let text = value
                    .map_or_else(|| "–".to_owned(), |v| if v >= 100.0 { format!("{v:.0}") } else { format!("{v:.1}") });
                panel.draw(&Text::new(text, (x + 4, y + cell / 2 - 6), ("sans-serif", 12))).map_err(e)?;
            }
        }
    }
    Ok(())
}
