//! `SpanLog`: a process's newest spans in a bounded ring, their names kept
//! once each (at most [`MAX_SPAN_NAMES`]), summarized per name for the page.

use std::collections::VecDeque;

use shared::bridge::{Span, SpanSummary};

/// Spans kept per process for the summaries (about 40 bytes each).
pub const SPANS_KEPT: usize = 1_000;
/// Distinct span names kept per process; spans of further names are not kept.
pub const MAX_SPAN_NAMES: usize = 16;

/// A span without its name (an index into [`SpanLog::names`]).
#[derive(Debug, Clone, Copy)]
struct CompactSpan {
    name: u16,
    device: u32,
    start_ms: u64,
    elapsed_ms: f64,
    memory_delta: i64,
    memory_peak: u64,
    peak_bound: bool,
}

/// The spans one attached process reported, bounded in count and in names.
#[derive(Debug, Default)]
pub struct SpanLog {
    names: Vec<String>,
    ring: VecDeque<CompactSpan>,
}

impl SpanLog {
    pub fn push(&mut self, span: &Span) {
        let index = match self.names.iter().position(|n| *n == span.name) {
            Some(index) => index,
            None if self.names.len() < MAX_SPAN_NAMES => {
                self.names.push(span.name.clone());
                self.names.len() - 1
            }
            // A name past the first MAX_SPAN_NAMES: not kept (the page has no room for it either).
            None => return,
        };
        if self.ring.len() == SPANS_KEPT {
            self.ring.pop_front();
        }
        self.ring.push_back(CompactSpan {
            // MAX_SPAN_NAMES keeps the index far below u16::MAX.
            name: index as u16,
            device: span.device,
            start_ms: span.start_ms,
            elapsed_ms: span.elapsed_ms,
            memory_delta: span.memory_delta,
            memory_peak: span.memory_peak,
            peak_bound: span.peak_bound,
        });
    }

    /// The newest `count` spans, oldest first.
    pub fn recent(&self, count: usize) -> Vec<Span> {
        self.ring
            .iter()
            .skip(self.ring.len().saturating_sub(count))
            .map(|s| Span {
                name: self.names[usize::from(s.name)].clone(),
                device: s.device,
                start_ms: s.start_ms,
                elapsed_ms: s.elapsed_ms,
                memory_delta: s.memory_delta,
                memory_peak: s.memory_peak,
                peak_bound: s.peak_bound,
            })
            .collect()
    }

    /// Count, p50/p99 time, last memory delta and highest peak per span name (in name order).
    pub fn summaries(&self) -> Vec<SpanSummary> {
        let mut of_name: Vec<Vec<&CompactSpan>> = vec![Vec::new(); self.names.len()];
        for span in &self.ring {
            of_name[usize::from(span.name)].push(span);
        }
        let mut out: Vec<SpanSummary> = of_name
            .into_iter()
            .zip(&self.names)
            .filter(|(spans, _)| !spans.is_empty())
            .map(|(spans, name)| {
                let mut times: Vec<f64> = spans.iter().map(|s| s.elapsed_ms).collect();
                times.sort_by(f64::total_cmp);
                let pick = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
                // The highest peak, and whether it is only a bound ("≤"): an exact one wins a tie.
                let top = spans.iter().max_by_key(|s| (s.memory_peak, !s.peak_bound));
                SpanSummary {
                    name: name.clone(),
                    count: spans.len() as u64,
                    p50_ms: pick(0.5),
                    p99_ms: pick(0.99),
                    last_memory_delta: spans.last().map_or(0, |s| s.memory_delta),
                    max_memory_peak: top.map_or(0, |s| s.memory_peak),
                    max_memory_peak_bound: top.is_some_and(|s| s.peak_bound),
                }
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(name: &str, i: u64) -> Span {
        Span {
            name: name.into(),
            device: 0,
            start_ms: i,
            elapsed_ms: i as f64,
            memory_delta: 5,
            memory_peak: i,
            peak_bound: false,
        }
    }

    #[test]
    fn summaries_per_name() {
        let mut log = SpanLog::default();
        for i in 1..=100 {
            log.push(&span("step", i));
        }
        log.push(&span("eval", 7));
        let summaries = log.summaries();
        assert_eq!(summaries.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["eval", "step"]);
        let step = &summaries[1];
        assert_eq!((step.count, step.p50_ms, step.p99_ms, step.max_memory_peak), (100, 51.0, 99.0, 100));
        assert_eq!(log.recent(2).iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["step", "eval"]);
    }

    #[test]
    fn spans_and_names_stay_bounded() {
        let mut log = SpanLog::default();
        for i in 0..(SPANS_KEPT as u64 * 3) {
            log.push(&span(&format!("name-{}", i % 40), i));
        }
        assert_eq!(log.ring.len(), SPANS_KEPT);
        assert_eq!(log.names.len(), MAX_SPAN_NAMES);
        assert_eq!(log.summaries().len(), MAX_SPAN_NAMES);
        assert_eq!(log.recent(5).len(), 5);
    }
}
