//! What a GPU's series say that does not change between refreshes: its memory total (used, free
//! and reserved together) and its labels (model, UUID, host name). The refresh reads the labels
//! once a [`KEPT_FOR`] and the totals once a [`TOTALS_KEPT_FOR`] (a GPU's total changes only when
//! the GPU does, and then its UUID changes too: its total is read again at once), or both at once
//! when a GPU appears that has none; otherwise it asks only the used-memory figure per GPU, thin
//! (instance and GPU), dressing it here with the kept labels (or its pod's, read fresh) and
//! deriving free memory from the kept total: half of what Prometheus reads and sends per refresh
//! at 1,000 hosts.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::client::Series;
use super::sweep::Sweep;

/// How long the kept labels serve before the refresh asks them again.
pub const KEPT_FOR: Duration = Duration::from_secs(60);
/// How long the kept memory totals serve before the refresh asks them again (the costliest
/// query of the fleet: free and reserved memory of every GPU).
pub const TOTALS_KEPT_FOR: Duration = Duration::from_secs(600);

/// One round's answers: each sweep's series, with their metric names.
pub type Round = Vec<(Sweep, Vec<(String, Series)>)>;

type GpuKey = (String, String);

/// Each GPU's memory total (MiB) and labels, by (instance, gpu), and when each was read.
#[derive(Debug, Default, Clone)]
pub struct Kept {
    totals: HashMap<GpuKey, f64>,
    labels: HashMap<GpuKey, BTreeMap<String, String>>,
    /// When the totals and the labels were read; `None`: read them at the next refresh.
    totals_at: Option<Instant>,
    labels_at: Option<Instant>,
}

fn gpu_key(s: &Series) -> Option<GpuKey> {
    Some((s.label("instance")?.to_owned(), s.label("gpu")?.to_owned()))
}

fn of(round: &Round, sweep: Sweep) -> impl Iterator<Item = &Series> {
    round.iter().filter(move |(s, _)| *s == sweep).flat_map(|(_, series)| series.iter().map(|(_, s)| s))
}

fn asked(round: &Round, sweep: Sweep) -> bool {
    round.iter().any(|(s, _)| *s == sweep)
}

/// The kept sweeps a refresh asks now: all without anything kept, else those whose answers are old.
pub fn due(kept: Option<&Kept>, now: Instant) -> Vec<Sweep> {
    let old = |at: Option<Instant>, kept_for: Duration| at.is_none_or(|at| now.duration_since(at) >= kept_for);
    let (labels, totals) =
        kept.map_or((true, true), |k| (old(k.labels_at, KEPT_FOR), old(k.totals_at, TOTALS_KEPT_FOR)));
    [(Sweep::Identity, labels), (Sweep::FreeReserved, totals)].into_iter().filter(|(_, d)| *d).map(|(s, _)| s).collect()
}

impl Kept {
    /// The totals and labels of a round that asked every sweep (the kept ones too), read `now`.
    pub fn from_round(round: &Round, now: Instant) -> Self {
        Self::updated(None, round, now)
    }

    /// `old`, with what `round` read `now` of the kept sweeps in its place. A GPU whose UUID changed
    /// (another card in its slot) loses its kept total, so the refresh reads it again.
    pub fn updated(old: Option<&Self>, round: &Round, now: Instant) -> Self {
        let mut kept = old.cloned().unwrap_or_default();
        if asked(round, Sweep::Identity) {
            let mut labels = HashMap::new();
            for s in of(round, Sweep::Identity) {
                if let Some(key) = gpu_key(s) {
                    labels.entry(key).or_insert_with(|| s.labels.clone());
                }
            }
            let uuid = |l: &BTreeMap<String, String>| l.get("UUID").cloned();
            kept.totals.retain(|key, _| {
                kept.labels.get(key).is_none_or(|l| labels.get(key).is_none_or(|n| uuid(n) == uuid(l)))
            });
            (kept.labels, kept.labels_at) = (labels, Some(now));
        }
        if asked(round, Sweep::FreeReserved) {
            let free: HashMap<GpuKey, f64> =
                of(round, Sweep::FreeReserved).filter_map(|s| Some((gpu_key(s)?, s.value))).collect();
            let totals = of(round, Sweep::FbUsed)
                .filter_map(|s| {
                    let key = gpu_key(s)?;
                    let total = s.value + free.get(&key)?;
                    Some((key, total))
                })
                .collect();
            (kept.totals, kept.totals_at) = (totals, Some(now));
        }
        kept
    }

    /// Whether every GPU of `round`'s used-memory answer has a kept total and labels.
    pub fn covers(&self, round: &Round) -> bool {
        of(round, Sweep::FbUsed)
            .filter_map(gpu_key)
            .all(|key| self.totals.contains_key(&key) && self.labels.contains_key(&key))
    }
}

/// Dresses `round`'s thin used-memory series with their GPU's labels: its pod's series when it has
/// one, else this round's [`Sweep::Identity`] answer when it was asked, else `kept`'s; and, when
/// the round did not ask [`Sweep::FreeReserved`], derives it from `kept`'s totals.
pub fn dress(round: &mut Round, kept: Option<&Kept>) {
    let mut labels: HashMap<GpuKey, BTreeMap<String, String>> = HashMap::new();
    for s in of(round, Sweep::Pods).chain(of(round, Sweep::Identity)) {
        if let Some(key) = gpu_key(s) {
            labels.entry(key).or_insert_with(|| s.labels.clone());
        }
    }
    let asked_free = round.iter().any(|(s, _)| *s == Sweep::FreeReserved);
    let mut free = Vec::new();
    for (_, series) in round.iter_mut().filter(|(s, _)| *s == Sweep::FbUsed) {
        for (_, s) in series.iter_mut() {
            let Some(key) = gpu_key(s) else { continue };
            if let Some(total) = kept.filter(|_| !asked_free).and_then(|k| k.totals.get(&key)) {
                let thin = s.labels.clone();
                free.push((String::new(), Series { labels: thin, value: (total - s.value).max(0.0) }));
            }
            if let Some(full) = labels.get(&key).or_else(|| kept.and_then(|k| k.labels.get(&key))) {
                s.labels.clone_from(full);
            }
        }
    }
    if !asked_free {
        round.push((Sweep::FreeReserved, free));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base::clock::Clock;

    fn series(labels: &[(&str, &str)], value: f64) -> (String, Series) {
        let labels = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        (String::new(), Series { labels, value })
    }

    const A0: [(&str, &str); 2] = [("instance", "a:1"), ("gpu", "0")];

    fn full(uuid: &str) -> (String, Series) {
        series(&[("instance", "a:1"), ("gpu", "0"), ("UUID", uuid), ("modelName", "NVIDIA H200")], 1000.0)
    }

    #[test]
    fn totals_and_labels_are_kept_and_free_memory_follows_used() {
        let first: Round = vec![
            (Sweep::FbUsed, vec![series(&A0, 1000.0)]),
            (Sweep::FreeReserved, vec![series(&A0, 142_000.0)]),
            (Sweep::Identity, vec![full("GPU-1")]),
        ];
        let kept = Kept::from_round(&first, Clock::manual().now());
        let mut later: Round = vec![(Sweep::FbUsed, vec![series(&A0, 100_000.0)])];
        assert!(kept.covers(&later));
        dress(&mut later, Some(&kept));
        let used = &later[0].1[0].1;
        assert_eq!((used.label("UUID"), used.value), (Some("GPU-1"), 100_000.0), "kept labels, fresh figure");
        let free = &later.iter().find(|(s, _)| *s == Sweep::FreeReserved).unwrap().1[0].1;
        assert_eq!(free.value, 43_000.0, "the kept total less what is used now");

        let new_gpu: Round = vec![(Sweep::FbUsed, vec![series(&[("instance", "b:1"), ("gpu", "0")], 5.0)])];
        assert!(!kept.covers(&new_gpu), "a new GPU has no total yet: the round asks");
    }

    /// GPU-1 in slot a:1/0, 1 MiB used and 9 free, all read at `now`.
    fn one_gpu_kept(now: Instant) -> Kept {
        Kept::from_round(
            &vec![
                (Sweep::FbUsed, vec![series(&A0, 1.0)]),
                (Sweep::FreeReserved, vec![series(&A0, 9.0)]),
                (Sweep::Identity, vec![full("GPU-1")]),
            ],
            now,
        )
    }

    #[test]
    fn a_pod_label_is_fresh_and_a_round_that_asked_keeps_its_own_answers() {
        let now = Clock::manual().now();
        let kept = one_gpu_kept(now);
        let pod = series(&[("instance", "a:1"), ("gpu", "0"), ("pod", "train-0"), ("namespace", "ml")], 4.0);
        let mut round: Round = vec![(Sweep::FbUsed, vec![series(&A0, 4.0)]), (Sweep::Pods, vec![pod])];
        dress(&mut round, Some(&kept));
        assert_eq!(round[0].1[0].1.label("pod"), Some("train-0"));

        let mut asked: Round = vec![
            (Sweep::FbUsed, vec![series(&A0, 4.0)]),
            (Sweep::FreeReserved, vec![series(&A0, 6.0)]),
            (Sweep::Identity, vec![full("GPU-2")]),
        ];
        dress(&mut asked, Some(&kept));
        assert_eq!(asked[0].1[0].1.label("UUID"), Some("GPU-2"), "this round's labels win");
        assert_eq!(asked.iter().filter(|(s, _)| *s == Sweep::FreeReserved).count(), 1);
    }

    #[test]
    fn labels_are_read_again_before_totals_and_a_new_card_loses_its_total() {
        let now = Clock::manual().now();
        assert_eq!(due(None, now), [Sweep::Identity, Sweep::FreeReserved], "nothing kept: read both");
        let kept = one_gpu_kept(now);
        assert!(due(Some(&kept), now).is_empty(), "both just read");
        let later = now + KEPT_FOR;
        assert_eq!(due(Some(&kept), later), [Sweep::Identity], "labels once a minute, totals once in ten");
        assert_eq!(due(Some(&kept), now + TOTALS_KEPT_FOR), [Sweep::Identity, Sweep::FreeReserved]);

        let same_card: Round = vec![(Sweep::FbUsed, vec![series(&A0, 2.0)]), (Sweep::Identity, vec![full("GPU-1")])];
        let relabelled = Kept::updated(Some(&kept), &same_card, later);
        assert!(relabelled.covers(&same_card) && due(Some(&relabelled), later).is_empty());
        assert_eq!(relabelled.totals[&("a:1".to_owned(), "0".to_owned())], 10.0, "the total is kept");

        let new_card: Round = vec![(Sweep::FbUsed, vec![series(&A0, 2.0)]), (Sweep::Identity, vec![full("GPU-2")])];
        let swapped = Kept::updated(Some(&kept), &new_card, later);
        assert!(!swapped.covers(&new_card), "another card in the slot: its total is read again");
    }
}
