//! What a GPU process runs in (a container, a Kubernetes pod, a Slurm job) and the one rule
//! for whom it belongs to. Every team feature that says "user" (the process table, usage,
//! idle holders, reservations, alerts, operators' signal rights) asks [`owner_of`].

use serde::{Deserialize, Serialize};

/// Longest name, image or label value kept, in characters; longer ones are cut and end in "…".
pub const MAX_TEXT: usize = 128;
/// Most labels kept per container (the first ones in name order).
pub const MAX_LABELS: usize = 32;
/// The container label that names a container's owner unless `--owner-label` says otherwise.
pub const DEFAULT_OWNER_LABEL: &str = "gpudash.user";
/// Docker Compose's labels for a container's project and service.
pub const COMPOSE_PROJECT_LABEL: &str = "com.docker.compose.project";
pub const COMPOSE_SERVICE_LABEL: &str = "com.docker.compose.service";

/// Where a process runs; every part is optional and they nest (a pod's container, a job's container).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Workload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Pod>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<SlurmJob>,
}

/// A Docker, Podman, containerd or CRI-O container.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Container {
    /// The first 12 hex digits of its id, as `docker ps` shows it.
    pub id: String,
    /// "docker", "podman", "containerd" or "cri-o", from the cgroup path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Its name, from the engine's API; `None` when no API answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Its labels, name-sorted, at most [`MAX_LABELS`], each cut to [`MAX_TEXT`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<(String, String)>,
    /// The labels came from an engine whose socket root (or gpudash's own user) controls, so the
    /// owner label names an owner; a rootless or user-writable engine's labels are shown, never
    /// believed (its user could label any container with anyone's name).
    #[serde(default)]
    pub trusted: bool,
}

impl Container {
    /// The value of label `name`, if it has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Docker Compose's project, from its label.
    pub fn compose_project(&self) -> Option<&str> {
        self.label(COMPOSE_PROJECT_LABEL)
    }

    /// Docker Compose's service, from its label.
    pub fn compose_service(&self) -> Option<&str> {
        self.label(COMPOSE_SERVICE_LABEL)
    }

    /// Its name, else its short id.
    pub fn shown_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.id)
    }
}

/// A Kubernetes pod (from the kubelet's pod-resources API, or only its UID from the cgroup path).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Pod {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The container's name within the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The pod's UID, from the cgroup path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The value of the pod's owner label, else annotation (the key `--owner-label` names), from
    /// the Kubernetes API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// A GPU the scheduler gave to a pod (the kubelet's pod-resources answer), whether or not the
/// pod computes on it yet: the lab keeps off it unless an admin forces a run.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ScheduledGpu {
    pub index: u32,
    pub pod: Pod,
}

impl ScheduledGpu {
    /// "pod ml/bert-0 (container trainer)".
    pub fn holder(&self) -> String {
        let pod = describe(&Workload { pod: Some(self.pod.clone()), ..Workload::default() }).unwrap_or_default();
        match &self.pod.container {
            Some(container) => format!("{pod} (container {container})"),
            None => pod,
        }
    }
}

/// A Slurm job.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmJob {
    /// The job id (digits; an array task's own id).
    pub id: String,
    /// `SLURM_JOB_USER`: who submitted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Slurm itself placed the process in this job: its cgroup, in Slurm's own layout, names the
    /// same job id, and the job's uid is the process's. Only a verified job names an owner or
    /// counts as the job in usage and metrics; an unverified one is what the process's
    /// environment claims, shown as such (anyone can set `SLURM_JOB_USER`).
    #[serde(default)]
    pub verified: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
}

/// Where an owner's name came from, in the order [`owner_of`] tries them.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum OwnerSource {
    /// The Slurm job's user.
    SlurmJob,
    /// The pod's owner label or annotation.
    PodLabel,
    /// The pod's namespace.
    Namespace,
    /// The container's owner label (`--owner-label`).
    ContainerLabel,
    /// A container without that label: "container NAME".
    Container,
    /// The process's Unix user.
    UnixUser,
}

impl OwnerSource {
    /// How the page says where the name came from.
    pub fn describe(self) -> &'static str {
        match self {
            Self::SlurmJob => "the Slurm job's user",
            Self::PodLabel => "the pod's owner label",
            Self::Namespace => "the pod's namespace",
            Self::ContainerLabel => "the container's owner label",
            Self::Container => "the container (no owner label; its processes run as root)",
            Self::UnixUser => "the Unix user",
        }
    }
}

/// Who a process belongs to, and why.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub name: String,
    pub source: OwnerSource,
}

/// The owner rule: the first of the verified Slurm job's user, the pod's owner label or
/// annotation, the pod's namespace, for a root process in a container the container's `owner_label` (only from an
/// engine root controls: [`Container::trusted`]), and the Unix user. A root process in a container without that label is
/// owned by "container NAME" (root in a container is whoever started it, not the machine's admin).
/// `None` only when nothing at all is known (a process /proc hides).
pub fn owner_of(unix_user: Option<&str>, workload: Option<&Workload>, owner_label: &str) -> Option<Owner> {
    let owner = |name: &str, source| Some(Owner { name: name.to_owned(), source });
    let empty = Workload::default();
    let w = workload.unwrap_or(&empty);
    if let Some(user) = w.job.as_ref().filter(|j| j.verified).and_then(|j| j.user.as_deref()).filter(|u| !u.is_empty())
    {
        return owner(user, OwnerSource::SlurmJob);
    }
    if let Some(label) = w.pod.as_ref().and_then(|p| p.owner.as_deref()).filter(|n| !n.is_empty()) {
        return owner(label, OwnerSource::PodLabel);
    }
    if let Some(namespace) = w.pod.as_ref().and_then(|p| p.namespace.as_deref()).filter(|n| !n.is_empty()) {
        return owner(namespace, OwnerSource::Namespace);
    }
    // A process running as a user in a container (`--user 1000`, a rootless engine) is that user's;
    // root in a container is whoever started it, which the label or the container's name says.
    if let Some(container) = w.container.as_ref().filter(|_| unix_user.is_none_or(|u| u == "root" || u == "0")) {
        if let Some(label) = container.label(owner_label).filter(|v| container.trusted && !v.is_empty()) {
            return owner(label, OwnerSource::ContainerLabel);
        }
        return owner(&format!("container {}", container.shown_name()), OwnerSource::Container);
    }
    unix_user.and_then(|user| owner(user, OwnerSource::UnixUser))
}

/// A name or label read from a container engine, the kubelet or a process's environment, as
/// gpudash keeps it: hidden characters dropped ([`crate::text::shown`]), cut to [`MAX_TEXT`].
pub fn bounded(text: &str) -> String {
    let shown = crate::text::shown(text.trim());
    match shown.char_indices().nth(MAX_TEXT) {
        None => shown,
        Some((cut, _)) => {
            let mut kept = shown[..cut].to_owned();
            kept.pop();
            kept.push('…');
            kept
        }
    }
}

/// Labels as gpudash keeps them: each [`bounded`], name-sorted, at most [`MAX_LABELS`]; the owner
/// and Compose labels are kept first, whatever their place, so a flood of labels cannot hide them.
pub fn bounded_labels<'a>(
    labels: impl IntoIterator<Item = (&'a str, &'a str)>,
    owner_label: &str,
) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = labels.into_iter().map(|(k, v)| (bounded(k), bounded(v))).collect();
    let wanted = |k: &str| k == owner_label || k == COMPOSE_PROJECT_LABEL || k == COMPOSE_SERVICE_LABEL;
    crate::order::sort_by(&mut all, |a, b| wanted(&b.0).cmp(&wanted(&a.0)).then_with(|| a.0.cmp(&b.0)));
    all.dedup_by(|a, b| a.0 == b.0);
    all.truncate(MAX_LABELS);
    crate::order::sort(&mut all);
    all
}

/// What a workload is called in one short phrase: "container trainer (pytorch:24.05)", "pod ml/bert-0",
/// "Slurm job 4242"; nested parts joined by " in ".
pub fn describe(workload: &Workload) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(pod) = &workload.pod {
        let name = match (&pod.namespace, &pod.name) {
            (Some(ns), Some(name)) => format!("pod {ns}/{name}"),
            (None, Some(name)) => format!("pod {name}"),
            _ => format!("pod {}", pod.uid.as_deref().unwrap_or("?")),
        };
        parts.push(name);
    } else if let Some(c) = &workload.container {
        parts.push(match &c.image {
            Some(image) => format!("container {} ({image})", c.shown_name()),
            None => format!("container {}", c.shown_name()),
        });
    }
    if let Some(job) = &workload.job {
        parts.push(format!("Slurm job {}{}", job.id, if job.verified { "" } else { " (unverified)" }));
    }
    (!parts.is_empty()).then(|| parts.join(" in "))
}

/// The workload's short name for a table cell: the container's name, the pod's `NS/NAME`, or
/// "job N" (a job in a container: the container's).
pub fn short_name(workload: &Workload) -> Option<String> {
    if let Some(pod) = &workload.pod {
        return Some(match (&pod.namespace, &pod.name) {
            (Some(ns), Some(name)) => format!("{ns}/{name}"),
            (_, Some(name)) => name.clone(),
            _ => format!("pod {}", pod.uid.as_deref().unwrap_or("?")),
        });
    }
    if let Some(c) = &workload.container {
        return Some(c.shown_name().to_owned());
    }
    workload.job.as_ref().map(|j| format!("job {}{}", j.id, if j.verified { "" } else { " (unverified)" }))
}

/// Everything known of a workload, one "name: value" line each, for a tooltip or a card.
pub fn facts(workload: &Workload) -> Vec<String> {
    let mut lines = Vec::new();
    let mut push = |name: &str, value: Option<&str>| {
        if let Some(value) = value {
            lines.push(format!("{name}: {value}"));
        }
    };
    if let Some(c) = &workload.container {
        push("container", c.name.as_deref());
        push("container id", Some(&c.id));
        push("image", c.image.as_deref());
        push("runtime", c.runtime.as_deref());
        push("compose project", c.compose_project());
        push("compose service", c.compose_service());
    }
    if let Some(p) = &workload.pod {
        push("namespace", p.namespace.as_deref());
        push("pod", p.name.as_deref());
        push("pod container", p.container.as_deref());
        push("pod UID", p.uid.as_deref());
    }
    if let Some(j) = &workload.job {
        push("Slurm job", Some(&j.id));
        push("job", (!j.verified).then_some(UNVERIFIED_JOB));
        push("job user", j.user.as_deref());
        push("account", j.account.as_deref());
        push("partition", j.partition.as_deref());
    }
    if let Some(c) = &workload.container {
        for (k, v) in c.labels.iter().filter(|(k, _)| k != COMPOSE_PROJECT_LABEL && k != COMPOSE_SERVICE_LABEL) {
            lines.push(format!("label {k}={v}"));
        }
    }
    lines
}

/// What a card or tooltip says of a job only the process's environment names.
pub const UNVERIFIED_JOB: &str = "unverified (only the process's environment names it, not Slurm's cgroup with the same uid): owned by its Unix user";

/// The verified Slurm job, if any: what usage and metrics count as the job.
pub fn verified_job(workload: &Workload) -> Option<&SlurmJob> {
    workload.job.as_ref().filter(|j| j.verified)
}

/// A workload's kinds of name, as usage groups them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Container,
    Pod,
    Namespace,
    Job,
}

impl Part {
    fn key(self) -> &'static str {
        match self {
            Self::Container => "container",
            Self::Pod => "pod",
            Self::Namespace => "namespace",
            Self::Job => "job",
        }
    }
}

/// The workload as one stored string, `container=NAME;pod=NS/NAME;namespace=NS;job=ID` (the parts it
/// has; empty for none): what usage keeps per bucket, to group by any part later ([`key_part`]).
pub fn usage_key(workload: Option<&Workload>) -> String {
    let Some(w) = workload else { return String::new() };
    let clean = |v: &str| v.replace([';', '='], "_");
    let pod = w.pod.as_ref();
    let pod_name = pod.and_then(|p| match (&p.namespace, &p.name) {
        (Some(ns), Some(name)) => Some(format!("{ns}/{name}")),
        (None, Some(name)) => Some(name.clone()),
        _ => p.uid.clone(),
    });
    let parts = [
        (Part::Container, w.container.as_ref().map(|c| c.shown_name().to_owned())),
        (Part::Pod, pod_name),
        (Part::Namespace, pod.and_then(|p| p.namespace.clone())),
        (Part::Job, verified_job(w).map(|j| j.id.clone())),
    ];
    let kept: Vec<String> =
        parts.into_iter().filter_map(|(part, v)| v.map(|v| format!("{}={}", part.key(), clean(&v)))).collect();
    kept.join(";")
}

/// One part of a [`usage_key`]; `None` when the workload has no such part.
pub fn key_part(key: &str, part: Part) -> Option<&str> {
    key.split(';').find_map(|kv| kv.strip_prefix(part.key())?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(labels: &[(&str, &str)]) -> Workload {
        Workload {
            container: Some(Container {
                id: "c0ffee123456".into(),
                name: Some("trainer".into()),
                labels: bounded_labels(labels.iter().copied(), DEFAULT_OWNER_LABEL),
                trusted: true,
                ..Container::default()
            }),
            ..Workload::default()
        }
    }

    #[test]
    fn the_owner_is_the_first_of_job_user_namespace_label_and_unix_user() {
        let job = SlurmJob { id: "42".into(), user: Some("ana".into()), verified: true, ..SlurmJob::default() };
        let pod = Pod { namespace: Some("ml".into()), owner: Some("cy".into()), ..Pod::default() };
        let mut w = container(&[("gpudash.user", "bo")]);
        w.pod = Some(pod);
        w.job = Some(job);
        let o = |w: &Workload, user| owner_of(user, Some(w), DEFAULT_OWNER_LABEL).unwrap();
        assert_eq!(o(&w, Some("root")), Owner { name: "ana".into(), source: OwnerSource::SlurmJob });
        // A job only the environment claims names no owner: the next source does.
        w.job.as_mut().unwrap().verified = false;
        assert_eq!(o(&w, Some("root")), Owner { name: "cy".into(), source: OwnerSource::PodLabel });
        let claimed = Workload { job: w.job.clone(), ..Workload::default() };
        assert_eq!(o(&claimed, Some("bo")), Owner { name: "bo".into(), source: OwnerSource::UnixUser });
        w.job = None;
        assert_eq!(o(&w, Some("root")), Owner { name: "cy".into(), source: OwnerSource::PodLabel });
        w.pod.as_mut().unwrap().owner = None;
        assert_eq!(o(&w, Some("root")), Owner { name: "ml".into(), source: OwnerSource::Namespace });
        w.pod = None;
        assert_eq!(o(&w, Some("root")), Owner { name: "bo".into(), source: OwnerSource::ContainerLabel });
        let mut untrusted = container(&[("gpudash.user", "bo")]);
        untrusted.container.as_mut().unwrap().trusted = false;
        assert_eq!(
            o(&untrusted, Some("root")).source,
            OwnerSource::Container,
            "a user's engine: its label is not believed"
        );
        let labelled = container(&[("gpudash.user", "bo")]);
        assert_eq!(o(&labelled, Some("cy")), Owner { name: "cy".into(), source: OwnerSource::UnixUser }, "--user cy");
        let unlabelled = container(&[]);
        assert_eq!(o(&unlabelled, Some("root")).name, "container trainer");
        assert_eq!(o(&unlabelled, Some("ana")), Owner { name: "ana".into(), source: OwnerSource::UnixUser });
        assert_eq!(o(&Workload::default(), Some("cy")).source, OwnerSource::UnixUser);
        assert_eq!(owner_of(None, None, DEFAULT_OWNER_LABEL), None);
        // Another label name is honoured; the default one then is just a label.
        assert_eq!(owner_of(Some("root"), Some(&container(&[("team", "vision")])), "team").unwrap().name, "vision");
    }

    #[test]
    fn names_are_cut_and_cleaned_and_labels_bounded_keeping_the_owner_label() {
        assert_eq!(bounded("  evil\u{202E}name\u{7}  "), "evilname");
        let long = "x".repeat(1000);
        let cut = bounded(&long);
        assert_eq!((cut.chars().count(), cut.ends_with('…')), (MAX_TEXT, true));
        let many: Vec<(String, String)> = (0..100).map(|i| (format!("a{i:03}"), "v".to_owned())).collect();
        let mut labels: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        labels.push(("zz.gpudash.user", "ignored"));
        labels.push(("gpudash.user", "ana"));
        let kept = bounded_labels(labels, DEFAULT_OWNER_LABEL);
        assert_eq!(kept.len(), MAX_LABELS);
        assert!(kept.iter().any(|(k, v)| k == "gpudash.user" && v == "ana"), "{kept:?}");
        assert!(kept.windows(2).all(|w| w[0].0 < w[1].0), "sorted");
    }

    #[test]
    fn workloads_are_described_in_one_phrase() {
        let mut w = container(&[]);
        w.container.as_mut().unwrap().image = Some("pytorch:24.05".into());
        assert_eq!(describe(&w).unwrap(), "container trainer (pytorch:24.05)");
        w.job = Some(SlurmJob { id: "7".into(), ..SlurmJob::default() });
        assert_eq!(describe(&w).unwrap(), "container trainer (pytorch:24.05) in Slurm job 7 (unverified)");
        assert_eq!(usage_key(Some(&w)), "container=trainer", "a claimed job is not the job's usage");
        w.job.as_mut().unwrap().verified = true;
        assert_eq!(describe(&w).unwrap(), "container trainer (pytorch:24.05) in Slurm job 7");
        w.pod = Some(Pod { namespace: Some("ml".into()), name: Some("bert-0".into()), ..Pod::default() });
        assert_eq!(describe(&w).unwrap(), "pod ml/bert-0 in Slurm job 7");
        assert_eq!(describe(&Workload::default()), None);
        assert_eq!(short_name(&w).as_deref(), Some("ml/bert-0"));
        assert!(facts(&w).contains(&"image: pytorch:24.05".to_owned()), "{:?}", facts(&w));
        assert!(facts(&w).contains(&"Slurm job: 7".to_owned()));
        let key = usage_key(Some(&w));
        assert_eq!(key, "container=trainer;pod=ml/bert-0;namespace=ml;job=7");
        assert_eq!((key_part(&key, Part::Pod), key_part(&key, Part::Job)), (Some("ml/bert-0"), Some("7")));
        assert_eq!((usage_key(None), key_part("", Part::Container)), (String::new(), None));
    }
}
