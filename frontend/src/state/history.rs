//! The history charts' data: the range picked, and each GPU's series of each
//! metric, the buckets `/api/history/all` answered followed by the live tail
//! merged in from ticks.

use shared::history::{HistoryAllResponse, HistoryPoint, Metric};

pub use shared::history::HistoryRange;

/// The metrics charted for every GPU, in the order shown.
pub const CHARTED: [Metric; 7] = [
    Metric::MemoryUsed,
    Metric::GpuUtil,
    Metric::SmActive,
    Metric::TensorActive,
    Metric::PowerDraw,
    Metric::Temperature,
    Metric::SmClock,
];

/// Every charted series: one per GPU and metric, all fetched in one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistorySet {
    lines: Vec<(u32, Metric, HistorySeries)>,
    /// Each GPU's newest live sample merged, so a tick is never merged twice.
    merged_until: Vec<(u32, u64)>,
}

impl HistorySet {
    /// The series of GPU `device`'s `metric`, if any sample or answer had it.
    pub fn series(&self, device: u32, metric: Metric) -> Option<&HistorySeries> {
        self.lines.iter().find(|(d, m, _)| *d == device && *m == metric).map(|(_, _, s)| s)
    }

    fn series_mut(&mut self, device: u32, metric: Metric) -> &mut HistorySeries {
        let at = match self.lines.iter().position(|(d, m, _)| *d == device && *m == metric) {
            Some(at) => at,
            None => {
                self.lines.push((device, metric, HistorySeries::live(1000)));
                self.lines.len() - 1
            }
        };
        &mut self.lines[at].2
    }

    /// A fetch went out: every series remembers the live samples that come meanwhile.
    pub fn begin_fetch(&mut self) {
        self.lines.iter_mut().for_each(|(_, _, s)| s.begin_fetch());
    }

    /// Takes the answer of `/api/history/all` for the charted metrics.
    pub fn finish_fetch(&mut self, answer: HistoryAllResponse) {
        for line in answer.lines.into_iter().filter(|l| CHARTED.contains(&l.metric)) {
            self.series_mut(line.device, line.metric).finish_fetch(answer.bucket_ms, line.points);
        }
    }

    /// The fetch failed: the points stay as they are.
    pub fn abandon_fetch(&mut self) {
        self.lines.iter_mut().for_each(|(_, _, s)| s.abandon_fetch());
    }

    /// Merges GPU `device`'s sample taken at `t` (its value of each charted metric),
    /// unless it was merged already; forgets buckets before `from`.
    pub fn push(&mut self, device: u32, t: u64, value: impl Fn(Metric) -> Option<f64>, from: u64) {
        match self.merged_until.iter_mut().find(|(d, _)| *d == device) {
            Some((_, until)) if *until >= t => return,
            Some((_, until)) => *until = t,
            None => self.merged_until.push((device, t)),
        }
        for metric in CHARTED {
            if let Some(v) = value(metric) {
                let series = self.series_mut(device, metric);
                series.push(t, v);
                series.trim_before(from);
            }
        }
    }
}

/// One chart's points, oldest first, on a grid of `bucket_ms`-wide buckets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistorySeries {
    points: Vec<HistoryPoint>,
    bucket_ms: u64,
    /// Samples merged into the last bucket, for its running mean (0: a fetched
    /// bucket, whose count the server does not say; it weighs as one).
    last_count: u32,
    /// Live samples seen since a fetch was sent, merged again into its answer.
    unfetched: Option<Vec<(u64, f64)>>,
}

impl HistorySeries {
    /// A series for live samples only, bucketed `bucket_ms` wide.
    pub fn live(bucket_ms: u64) -> Self {
        Self { bucket_ms, ..Self::default() }
    }

    pub fn points(&self) -> &[HistoryPoint] {
        &self.points
    }

    /// Width of the buckets, ms (0 before any fetch: one bucket per sample).
    pub fn bucket_ms(&self) -> u64 {
        self.bucket_ms
    }

    /// Starts remembering live samples, so a fetch's answer loses none that came meanwhile.
    pub fn begin_fetch(&mut self) {
        self.unfetched = Some(Vec::new());
    }

    /// Replaces the points with a fetch's answer, then merges in the live samples
    /// newer than its last bucket's start.
    pub fn finish_fetch(&mut self, bucket_ms: u64, points: Vec<HistoryPoint>) {
        let meanwhile = self.unfetched.take().unwrap_or_default();
        self.points = points;
        self.bucket_ms = bucket_ms;
        self.last_count = 0;
        for (t, value) in meanwhile {
            self.merge(t, value);
        }
    }

    /// Gives up on a fetch: the points stay as they are.
    pub fn abandon_fetch(&mut self) {
        self.unfetched = None;
    }

    /// Adds a live sample taken at `t` (ms since the epoch).
    pub fn push(&mut self, t: u64, value: f64) {
        if let Some(meanwhile) = &mut self.unfetched {
            meanwhile.push((t, value));
        }
        self.merge(t, value);
    }

    /// Forgets buckets that start before `from`.
    pub fn trim_before(&mut self, from: u64) {
        let keep_from = self.points.partition_point(|p| p.t < from);
        if keep_from > 0 {
            self.points.drain(..keep_from);
        }
    }

    fn merge(&mut self, t: u64, value: f64) {
        let Some(last) = self.points.last_mut() else {
            self.points.push(HistoryPoint { t, min: value, avg: value, max: value });
            self.last_count = 1;
            return;
        };
        if t < last.t {
            return;
        }
        if t - last.t < self.bucket_ms {
            let n = f64::from(self.last_count.max(1));
            last.min = last.min.min(value);
            last.max = last.max.max(value);
            last.avg = (last.avg * n + value) / (n + 1.0);
            self.last_count = self.last_count.max(1) + 1;
            return;
        }
        // Stay on the server's grid so buckets keep one width.
        let start = (t - last.t).checked_div(self.bucket_ms).map_or(t, |buckets| last.t + buckets * self.bucket_ms);
        self.points.push(HistoryPoint { t: start, min: value, avg: value, max: value });
        self.last_count = 1;
    }
}

/// The most lines a history chart draws when every GPU is shown: as many as the palette has colours.
pub const TOP_LINES: usize = 8;

/// The GPUs a chart of every GPU draws: all of them up to [`TOP_LINES`], else the [`TOP_LINES`] with the
/// biggest latest figure (`value`; GPUs without one last), in index order. The rest are "others".
pub fn top_lines(all: &[u32], value: impl Fn(u32) -> Option<f64>) -> Vec<u32> {
    if all.len() <= TOP_LINES {
        return all.to_vec();
    }
    let mut ranked: Vec<(u32, Option<f64>)> = all.iter().map(|&i| (i, value(i).filter(|v| v.is_finite()))).collect();
    shared::order::sort_by(&mut ranked, |a, b| match (a.1, b.1) {
        (Some(x), Some(y)) => y.total_cmp(&x).then(a.0.cmp(&b.0)),
        (x, y) => y.is_some().cmp(&x.is_some()).then(a.0.cmp(&b.0)),
    });
    let mut top: Vec<u32> = ranked.into_iter().take(TOP_LINES).map(|(i, _)| i).collect();
    shared::order::sort(&mut top);
    top
}

/// What ranks the lines every History chart draws when there are more GPUs than colours
/// (`lines=` in the URL names another of [`CHARTED`]).
pub const RANK_BY: Metric = Metric::GpuUtil;

/// The charted metric named `name` (`Metric::from_name`, limited to [`CHARTED`]): what may rank the lines.
pub fn charted(name: &str) -> Option<Metric> {
    Metric::from_name(name).filter(|m| CHARTED.contains(m))
}

/// The colour slot of each line drawn, shared by every History chart. While there are no more GPUs
/// than colours a GPU has its own (its index); past that, a GPU keeps the slot it was given for as
/// long as it stays among the lines, so a colour means one GPU in every chart and from one ranking
/// to the next, and a GPU joining the lines takes the lowest slot left free.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LineColors {
    /// `(GPU, slot)` of the lines drawn past [`TOP_LINES`] GPUs; empty for fewer.
    slots: Vec<(u32, usize)>,
}

impl LineColors {
    /// The slots for `lines` (of `gpus` GPUs in all), keeping the ones these lines already had.
    #[must_use]
    pub fn next(&self, lines: &[u32], gpus: usize) -> Self {
        if gpus <= TOP_LINES {
            return Self::default();
        }
        let mut slots: Vec<(u32, usize)> = self.slots.iter().copied().filter(|(i, _)| lines.contains(i)).collect();
        for &line in lines {
            if slots.iter().all(|&(i, _)| i != line) {
                let free = (0..).find(|s| slots.iter().all(|&(_, taken)| taken != *s)).unwrap_or(0);
                slots.push((line, free));
            }
        }
        Self { slots }
    }

    /// GPU `index`'s slot (its own index while there are no more GPUs than colours).
    pub fn of(&self, index: u32) -> usize {
        if self.slots.is_empty() {
            index as usize
        } else {
            self.slots.iter().find(|&&(i, _)| i == index).map_or(0, |&(_, slot)| slot)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(t: u64, min: f64, avg: f64, max: f64) -> HistoryPoint {
        HistoryPoint { t, min, avg, max }
    }

    #[test]
    fn live_samples_merge_into_buckets_on_the_grid() {
        let mut series = HistorySeries::live(1000);
        series.push(10_000, 4.0);
        series.push(10_400, 8.0);
        series.push(10_900, 6.0);
        series.push(9_000, 100.0);
        series.push(12_300, 1.0);
        assert_eq!(series.points(), [bucket(10_000, 4.0, 6.0, 8.0), bucket(12_000, 1.0, 1.0, 1.0)]);
        series.trim_before(11_000);
        assert_eq!(series.points(), [bucket(12_000, 1.0, 1.0, 1.0)]);
    }

    #[test]
    fn a_fetch_answer_keeps_the_samples_that_came_meanwhile() {
        let mut series = HistorySeries::live(1000);
        series.push(5_000, 1.0);
        series.begin_fetch();
        series.push(70_000, 9.0);
        series.push(130_000, 3.0);
        series.finish_fetch(60_000, vec![bucket(0, 1.0, 2.0, 5.0), bucket(60_000, 2.0, 2.0, 2.0)]);
        assert_eq!(
            series.points(),
            [bucket(0, 1.0, 2.0, 5.0), bucket(60_000, 2.0, 5.5, 9.0), bucket(120_000, 3.0, 3.0, 3.0)]
        );
        series.push(131_000, 5.0);
        assert_eq!(series.points()[2], bucket(120_000, 3.0, 4.0, 5.0));
    }

    #[test]
    fn ranges_read_as_their_buttons() {
        assert_eq!(HistoryRange::ALL.map(HistoryRange::key), ["5m", "1h", "24h", "7d"]);
    }

    #[test]
    fn one_answer_fills_every_gpu_and_a_tick_merges_once() {
        use shared::history::{HistoryLine, Resolution};
        let mut set = HistorySet::default();
        set.push(1, 5_000, |_| Some(1.0), 0);
        set.begin_fetch();
        set.push(1, 65_000, |m| (m == Metric::GpuUtil).then_some(9.0), 0);
        set.push(1, 65_000, |m| (m == Metric::GpuUtil).then_some(50.0), 0);
        let line = |device, metric| HistoryLine { device, metric, points: vec![bucket(0, 1.0, 1.0, 1.0)] };
        set.finish_fetch(HistoryAllResponse {
            from: 0,
            to: 120_000,
            bucket_ms: 60_000,
            resolution: Resolution::Raw,
            simulated: true,
            lines: vec![line(0, Metric::GpuUtil), line(1, Metric::GpuUtil), line(1, Metric::MemClock)],
        });
        assert_eq!(set.series(0, Metric::GpuUtil).unwrap().points(), [bucket(0, 1.0, 1.0, 1.0)]);
        assert_eq!(
            set.series(1, Metric::GpuUtil).unwrap().points(),
            [bucket(0, 1.0, 1.0, 1.0), bucket(60_000, 9.0, 9.0, 9.0)],
            "the sample that came meanwhile is merged once"
        );
        assert!(set.series(1, Metric::MemClock).is_none(), "memory clock is not charted");
    }

    #[test]
    fn many_gpus_chart_their_top_lines_in_distinct_colours() {
        let few: Vec<u32> = (0..8).collect();
        assert_eq!(top_lines(&few, |_| None), few);
        let many: Vec<u32> = (0..64).collect();
        let top = top_lines(&many, |i| (i % 10 != 0).then(|| f64::from(i % 16)));
        assert_eq!(
            top,
            [15, 31, 47, 63, 14, 46, 62, 13]
                .into_iter()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
        );
        let colors = LineColors::default().next(&top, 64);
        let slots: std::collections::BTreeSet<usize> = top.iter().map(|&i| colors.of(i)).collect();
        assert_eq!(slots.len(), TOP_LINES, "no two lines share a colour");
        let few = LineColors::default().next(&[5], 8);
        assert_eq!(few.of(5), 5, "a few GPUs keep their own colour, drilled down too");
        let unknown = top_lines(&many, |i| (i == 40).then_some(f64::NAN).or((i == 3).then_some(1.0)));
        assert_eq!(unknown, [0, 1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn a_gpu_keeps_its_colour_while_it_stays_among_the_lines() {
        let first = LineColors::default().next(&[3, 10, 20, 30, 40, 50, 60, 63], 64);
        assert_eq!((first.of(3), first.of(63)), (0, 7), "first given in index order");
        // 10 leaves and 5 joins (it sorts first): the others keep theirs, 5 takes 10's slot.
        let second = first.next(&[3, 5, 20, 30, 40, 50, 60, 63], 64);
        assert_eq!(second.of(5), first.of(10), "the slot left free");
        for gpu in [3, 20, 30, 40, 50, 60, 63] {
            assert_eq!(second.of(gpu), first.of(gpu), "GPU {gpu} keeps its colour");
        }
        // Drilled down to one GPU and back: it keeps its colour, the others take the lowest free.
        let one = second.next(&[40], 64);
        assert_eq!(one.of(40), second.of(40));
        let back = one.next(&[3, 5, 20, 30, 40, 50, 60, 63], 64);
        let slots: std::collections::BTreeSet<usize> = [3, 5, 20, 30, 40, 50, 60, 63].map(|g| back.of(g)).into();
        assert_eq!((back.of(40), slots.len()), (second.of(40), TOP_LINES), "distinct again, 40 unchanged");
    }
}
