//! Hosts whose scrape target is down: listed (as stale nodes without GPU figures, with the last
//! scrape's error) instead of dropped, since a GPU host that stopped answering is what an
//! operator most needs to see. Pure, like the join: the answers and targets come in.

use std::collections::BTreeSet;

use shared::fleet::{FleetNode, NodeKind};

use super::client::DownTarget;
use super::model::{Answers, FleetView, Query, host_of};

/// Adds to `view` the targets `up` says are down that it does not list yet, when their job is one
/// that scrapes GPU hosts (a job of a listed node: a down node_exporter is not a GPU host), and
/// gives every node that is down the error of its last scrape from `down`.
pub fn add_down_targets(view: &mut FleetView, answers: &Answers, down: &[DownTarget]) {
    let gpu_jobs: BTreeSet<String> = view.nodes.iter().map(|n| n.job.clone()).collect();
    let listed: BTreeSet<String> = view.nodes.iter().map(|n| n.instance.clone()).collect();
    let get = |q: Query| answers.get(&q).map_or(&[][..], Vec::as_slice);
    let last_seen = |instance: &str| {
        get(Query::LastSeen).iter().find(|s| s.label("instance") == Some(instance)).map(|s| (s.value * 1000.0) as u64)
    };
    for series in get(Query::Up).iter().filter(|s| s.value < 1.0) {
        let (Some(instance), Some(job)) = (series.label("instance"), series.label("job")) else { continue };
        if listed.contains(instance) || !gpu_jobs.contains(job) {
            continue;
        }
        // A job's targets run one exporter: a new one is of the kind its listed neighbours are.
        let kind = view.nodes.iter().find(|n| n.job == job).map_or(NodeKind::DcgmExporter, |n| n.kind);
        view.nodes.push(FleetNode {
            instance: instance.to_owned(),
            job: job.to_owned(),
            hostname: host_of(instance).to_owned(),
            kind,
            version: None,
            url: (kind == NodeKind::Gpudash).then(|| format!("http://{instance}/")),
            simulated: false,
            up: Some(false),
            stale: true,
            last_seen_ms: last_seen(instance),
            last_error: None,
            ..FleetNode::default()
        });
    }
    for node in view.nodes.iter_mut().filter(|n| n.up != Some(true)) {
        node.last_error = down.iter().find(|t| t.instance == node.instance).and_then(|t| t.last_error.clone());
    }
    view.nodes.sort_by(|a, b| (&a.hostname, &a.instance).cmp(&(&b.hostname, &b.instance)));
    view.summary.nodes = view.nodes.len() as u32;
    view.summary.stale_nodes = view.nodes.iter().filter(|n| n.stale).count() as u32;
    let mut hosts: BTreeSet<String> = view.choices.hosts.drain(..).collect();
    hosts.extend(view.nodes.iter().map(|n| n.hostname.clone()));
    view.choices.hosts = hosts.into_iter().collect();
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::fleet::client::Series;
    use crate::fleet::model::join;

    fn series(labels: &[(&str, &str)], value: f64) -> Series {
        Series {
            labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<BTreeMap<_, _>>(),
            value,
        }
    }

    #[test]
    fn a_down_gpu_target_is_listed_with_its_error_and_other_jobs_are_not() {
        let mut answers = Answers::new();
        answers.insert(
            Query::Up,
            vec![
                series(&[("instance", "gpu-1:7070"), ("job", "gpudash")], 1.0),
                series(&[("instance", "gpu-2:7070"), ("job", "gpudash")], 0.0),
                series(&[("instance", "db:9100"), ("job", "node")], 0.0),
            ],
        );
        answers.insert(
            Query::Info,
            vec![series(&[("instance", "gpu-1:7070"), ("job", "gpudash"), ("version", "0.1.0")], 1.0)],
        );
        answers
            .insert(Query::LastSeen, vec![series(&[("instance", "gpu-2:7070"), ("job", "gpudash")], 1_700_000_000.0)]);
        let mut view = join(&answers);
        assert_eq!(view.nodes.len(), 1, "the join alone drops the target that never sent GPU series");
        let error = "Get \"http://gpu-2:7070/metrics\": connection refused";
        let down =
            [DownTarget { instance: "gpu-2:7070".into(), job: "gpudash".into(), last_error: Some(error.into()) }];
        add_down_targets(&mut view, &answers, &down);

        let instances: Vec<&str> = view.nodes.iter().map(|n| n.instance.as_str()).collect();
        assert_eq!(instances, ["gpu-1:7070", "gpu-2:7070"], "db:9100 is no GPU host");
        let gpu2 = &view.nodes[1];
        assert!(gpu2.stale && gpu2.up == Some(false) && gpu2.gpus == 0, "{gpu2:?}");
        assert_eq!(gpu2.kind, NodeKind::Gpudash);
        assert_eq!(gpu2.hostname, "gpu-2");
        assert_eq!(gpu2.last_error.as_deref(), Some(error));
        assert_eq!(gpu2.last_seen_ms, Some(1_700_000_000_000));
        assert_eq!(view.nodes[0].last_error, None, "an up node has no scrape error");
        assert_eq!((view.summary.nodes, view.summary.stale_nodes), (2, 1));
        assert!(view.choices.hosts.contains(&"gpu-2".to_owned()));
    }
}
