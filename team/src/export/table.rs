//! A run as text: CSV for export (`GET /api/runs/{id}/results.csv`) and an aligned table for `gpudash bench`.

use std::fmt::Write as _;

use shared::lab::{Run, RunStatus};
use shared::units::format_bytes;

/// One CSV cell: quoted, and guarded against formulas ([`shared::csv::cell`], as every CSV gpudash writes).
fn csv_field(value: &str) -> std::borrow::Cow<'_, str> {
    shared::csv::cell(value)
}

/// One row per measured value: `section,name,x,median,min,max,n,unit,detail`.
pub fn csv(run: &Run) -> String {
    let mut out = String::from("run,device,kind,simulated,section,name,x,median,min,max,n,unit,detail\n");
    let head =
        format!("{},{},{},{}", run.summary.id, run.summary.device, run.summary.kind.name(), run.summary.simulated);
    let mut row =
        |section: &str, name: &str, x: String, stats: Option<(f64, f64, f64, u32)>, unit: &str, detail: &str| {
            let (median, min, max, n) = stats.map_or_else(
                || (String::new(), String::new(), String::new(), String::new()),
                |(a, b, c, n)| (a.to_string(), b.to_string(), c.to_string(), n.to_string()),
            );
            let _ = writeln!(
                out,
                "{head},{section},{},{x},{median},{min},{max},{n},{},{}",
                csv_field(name),
                csv_field(unit),
                csv_field(detail)
            );
        };
    let Some(r) = &run.result else { return out };
    for f in &r.figures {
        row("figure", &f.name, String::new(), Some((f.stats.median, f.stats.min, f.stats.max, f.stats.n)), &f.unit, "");
    }
    for s in &r.series {
        for p in &s.points {
            row("series", &s.name, p.x.to_string(), Some((p.y.median, p.y.min, p.y.max, p.y.n)), &r.unit, "");
        }
    }
    for l in &r.references {
        row("reference", &l.name, String::new(), Some((l.value, l.value, l.value, 1)), &r.unit, "");
    }
    for (i, s) in r.memory_steps.iter().enumerate() {
        let nvml = s.nvml_used.map_or_else(|| "n/a".to_owned(), |b| b.to_string());
        let detail = format!("allocated={} reserved={} nvml_used={nvml}", s.allocated, s.reserved);
        row("memory_step", &s.label, i.to_string(), None, "bytes", &detail);
    }
    for s in &r.timeline {
        let name = format!("{} / stream {} / {}", s.phase, s.stream, s.label);
        row("timeline", &name, String::new(), Some((s.end_ms - s.start_ms, s.start_ms, s.end_ms, 1)), "ms", "");
    }
    for m in &r.matrices {
        for (from, cells) in m.devices.iter().zip(&m.cells) {
            for (to, value) in m.devices.iter().zip(cells) {
                if let Some(v) = value {
                    row("matrix", &m.name, format!("{from}->{to}"), Some((*v, *v, *v, 1)), &m.unit, "");
                }
            }
        }
    }
    for c in &r.checks {
        row(
            "check",
            &c.name,
            String::new(),
            None,
            "",
            &format!("{}: {}", if c.passed { "pass" } else { "FAIL" }, c.detail),
        );
    }
    out
}

fn number(v: f64) -> String {
    if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A human-readable report of one run, as `gpudash bench` prints it.
pub fn text(run: &Run) -> String {
    let mut out = String::new();
    let s = &run.summary;
    let status = match s.status {
        RunStatus::Succeeded => "succeeded",
        RunStatus::Failed => "FAILED",
        RunStatus::Cancelled => "cancelled",
        RunStatus::TimedOut => "TIMED OUT",
        RunStatus::Queued | RunStatus::Running => "unfinished",
    };
    let _ = writeln!(
        out,
        "== {} on GPU {} ({}){} — {status}",
        s.kind.name(),
        s.device,
        run.environment.gpu_name,
        if s.simulated { " — SIMULATED" } else { "" }
    );
    if let Some(error) = &s.error {
        let _ = writeln!(out, "   {error}");
    }
    let Some(r) = &run.result else { return out };
    if !r.figures.is_empty() {
        let width = r.figures.iter().map(|f| f.name.chars().count()).max().unwrap_or(10).max(10);
        let _ = writeln!(out, "   {:<width$}  {:>10}  {:>10}  {:>10}  unit", "figure", "median", "min", "max");
        for f in &r.figures {
            let st = &f.stats;
            let _ = writeln!(
                out,
                "   {:<width$}  {:>10}  {:>10}  {:>10}  {}",
                f.name,
                number(st.median),
                number(st.min),
                number(st.max),
                f.unit
            );
        }
    }
    if !r.memory_steps.is_empty() {
        let _ = writeln!(out, "   {:<22} {:>12} {:>12} {:>12}", "step", "allocated", "reserved", "NVML used");
        for step in &r.memory_steps {
            let nvml = step.nvml_used.map_or_else(|| "n/a".to_owned(), format_bytes);
            let _ = writeln!(
                out,
                "   {:<22} {:>12} {:>12} {:>12}",
                step.label,
                format_bytes(step.allocated),
                format_bytes(step.reserved),
                nvml
            );
        }
    }
    if r.chart != shared::lab::ChartSpec::Gantt
        && r.series.iter().any(|s| s.points.len() > 1)
        && r.memory_steps.is_empty()
    {
        for series in &r.series {
            let points: Vec<String> = series
                .points
                .iter()
                .map(|p| {
                    let x = if r.unit == "GB/s" { format_bytes(p.x as u64) } else { number(p.x) };
                    format!("{x}: {}", number(p.y.median))
                })
                .collect();
            let _ = writeln!(out, "   {} ({}): {}", series.name, r.unit, points.join(", "));
        }
    }
    for line in &r.references {
        let _ = writeln!(out, "   reference: {} = {} {}", line.name, number(line.value), r.unit);
    }
    for m in &r.matrices {
        let _ = writeln!(out, "   {} ({}), rows from, columns to:", m.name, m.unit);
        let head: String = m.devices.iter().map(|d| format!("{:>10}", format!("GPU {d}"))).collect();
        let _ = writeln!(out, "   {:>8}{head}", "");
        for (from, cells) in m.devices.iter().zip(&m.cells) {
            let line: String =
                cells.iter().map(|v| format!("{:>10}", v.map_or_else(|| "-".to_owned(), number))).collect();
            let _ = writeln!(out, "   {:>8}{line}", format!("GPU {from}"));
        }
    }
    for check in &r.checks {
        let _ = writeln!(out, "   [{}] {}: {}", if check.passed { "PASS" } else { "FAIL" }, check.name, check.detail);
    }
    for note in &r.notes {
        let _ = writeln!(out, "   note: {note}");
    }
    if let Some(line) = &run.takeaway {
        let _ = writeln!(out, "   in PyTorch: {line}");
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_fields_with_commas_and_guards_formulas() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("line\rbreak"), "\"line\rbreak\"");
        assert_eq!(csv_field("=HYPERLINK(1)"), "'=HYPERLINK(1)");
    }
}
