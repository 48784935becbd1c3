//! What a process's cgroup path says of its workload: a container's id and runtime, a
//! Kubernetes pod's UID, a Slurm job's id. Read once per process; no API is asked here.

/// The workload ids one `/proc/<pid>/cgroup` names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupIds {
    /// The full 64-hex container id.
    pub container: Option<String>,
    /// "docker", "podman", "containerd" or "cri-o" when the path's naming tells.
    pub runtime: Option<&'static str>,
    /// The pod's UID, with dashes (systemd paths write them as underscores).
    pub pod_uid: Option<String>,
    /// The Slurm job id (`job_N`), only where the path is in Slurm's own layout: under
    /// `slurm*/uid_N/` (cgroup v1) or `system.slice/*slurmstepd.scope/` (v2), folders only root can
    /// make; a `job_N` folder a user made under their own delegated cgroup names nothing.
    pub slurm_job: Option<String>,
    /// The uid Slurm's v1 layout names above the job (`uid_N`), to compare with the process's.
    pub slurm_uid: Option<u32>,
}

/// Reads the ids from every line of a `/proc/<pid>/cgroup` (`ID:CONTROLLERS:PATH`, v1 and v2).
///
/// A user may make cgroups under their own systemd delegation (`/user.slice/…/user@UID.service/`)
/// and name a folder after anyone's container or pod: no id is read there (a rootless engine's
/// containers are their user's anyway). A pod UID is read only under the kubelet's own `kubepods`
/// root; a container id is confirmed against the engine's own answer (`within`).
pub fn parse(cgroup: &str) -> CgroupIds {
    let mut ids = CgroupIds::default();
    for path in cgroup.lines().filter_map(|line| line.splitn(3, ':').nth(2)) {
        // In a cgroup namespace of its own (a container on cgroup v2) others' paths start with "/..":
        // the layout is read from the first real segment.
        let root = path.split('/').find(|s| !s.is_empty() && *s != "..").unwrap_or_default();
        let delegated = root == "user.slice";
        let kubepods = root.starts_with("kubepods");
        let mut previous = "";
        for segment in path.split('/') {
            if ids.container.is_none()
                && !delegated
                && let Some((id, runtime)) = container(segment, previous)
            {
                ids.container = Some(id.to_owned());
                ids.runtime = runtime;
            }
            if ids.pod_uid.is_none() && kubepods {
                ids.pod_uid = pod_uid(segment);
            }
            previous = segment;
        }
        if ids.slurm_job.is_none()
            && let Some((job, uid)) = slurm_job(path)
        {
            (ids.slurm_job, ids.slurm_uid) = (Some(job.to_owned()), uid);
        }
    }
    ids
}

/// Whether a process whose `/proc/PID/cgroup` reads `process` is in the container `id` whose main
/// process's reads `main`: in every hierarchy where the main process's path names the container,
/// the process's path lies within the main's up to that segment (`/machine.slice/libpod-ID.scope`).
/// A folder a user made elsewhere with the same id is not within it.
pub fn within(process: &str, main: &str, id: &str) -> bool {
    let lines = |text: &str| -> Vec<(String, String)> {
        text.lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, ':');
                Some((parts.next()?.to_owned(), parts.nth(1)?.to_owned()))
            })
            .collect()
    };
    let process = lines(process);
    let mut named = lines(main).into_iter().filter_map(|(hierarchy, path)| {
        let end = path.find(id)?;
        let cut = path[end..].find('/').map_or(path.len(), |slash| end + slash);
        Some((hierarchy, path[..cut].to_owned()))
    });
    let mut any = false;
    let all = named.all(|(hierarchy, prefix)| {
        any = true;
        process.iter().any(|(h, path)| *h == hierarchy && (*path == prefix || path.starts_with(&format!("{prefix}/"))))
    });
    any && all
}

/// The job id (and, in v1, the uid) of a cgroup path in Slurm's own layout:
/// `/slurm[_NODE]/uid_N/job_M/...` (v1) or `/system.slice/[NODE_]slurmstepd.scope/job_M/...` (v2).
fn slurm_job(path: &str) -> Option<(&str, Option<u32>)> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty() && *s != "..").collect();
    fn job<'a>(segment: &&'a str) -> Option<&'a str> {
        segment.strip_prefix("job_").filter(|n| is_digits(n))
    }
    match segments.as_slice() {
        [root, uid, job_dir, ..] if root.starts_with("slurm") => {
            let uid = uid.strip_prefix("uid_").filter(|n| is_digits(n))?.parse().ok()?;
            Some((job(job_dir)?, Some(uid)))
        }
        ["system.slice", scope, job_dir, ..] if scope.ends_with("slurmstepd.scope") => Some((job(job_dir)?, None)),
        _ => None,
    }
}

/// A container id in one path segment: `docker-ID.scope`, `libpod-ID`, `cri-containerd-ID.scope`,
/// `crio-ID.scope`, or a bare id (under `/docker/`, or a pod's cgroup with the cgroupfs driver).
fn container<'a>(segment: &'a str, previous: &str) -> Option<(&'a str, Option<&'static str>)> {
    let name = segment.trim_end_matches(".scope");
    let (prefix, id) = match name.rsplit_once(['-', ':']) {
        Some((prefix, id)) => (prefix, id),
        None => ("", name),
    };
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let runtime = match prefix {
        "docker" => Some("docker"),
        "libpod" => Some("podman"),
        "cri-containerd" => Some("containerd"),
        "crio" => Some("cri-o"),
        "" if previous == "docker" => Some("docker"),
        _ => None,
    };
    Some((id, runtime))
}

/// A pod UID in `pod<uid>` (cgroupfs driver) or `kubepods-<qos>-pod<uid_with_underscores>.slice`.
fn pod_uid(segment: &str) -> Option<String> {
    let name = segment.trim_end_matches(".slice");
    let uid = name.rsplit_once("-pod").map(|(_, uid)| uid).or_else(|| name.strip_prefix("pod"))?;
    let uid = uid.replace('_', "-");
    let parts: Vec<usize> = uid.split('-').map(str::len).collect();
    (parts == [8, 4, 4, 4, 12] && uid.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit())).then_some(uid)
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.len() <= 20 && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4b1c2d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809";

    #[test]
    fn container_ids_and_runtimes_in_every_layout() {
        let cases = [
            (format!("12:memory:/docker/{ID}\n"), Some("docker")),
            (format!("0::/system.slice/docker-{ID}.scope\n"), Some("docker")),
            (format!("4:memory:/libpod_parent/libpod-{ID}\n"), Some("podman")),
            (format!("0::/machine.slice/libpod-{ID}.scope/container\n"), Some("podman")),
            (
                format!(
                    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_4a1b_8c9d_0e1f2a3b4c5d.slice/cri-containerd-{ID}.scope\n"
                ),
                Some("containerd"),
            ),
            (
                format!("0::/kubepods.slice/kubepods-pod1b2c3d4e_5f60_4a1b_8c9d_0e1f2a3b4c5d.slice/crio-{ID}.scope\n"),
                Some("cri-o"),
            ),
            (format!("3:cpu:/kubepods/burstable/pod1b2c3d4e-5f60-4a1b-8c9d-0e1f2a3b4c5d/{ID}\n"), None),
        ];
        for (cgroup, runtime) in cases {
            let ids = parse(&cgroup);
            assert_eq!((ids.container.as_deref(), ids.runtime), (Some(ID), runtime), "{cgroup}");
            if cgroup.contains("pod1b2c") {
                assert_eq!(ids.pod_uid.as_deref(), Some("1b2c3d4e-5f60-4a1b-8c9d-0e1f2a3b4c5d"), "{cgroup}");
            }
        }
    }

    #[test]
    fn slurm_jobs_in_v1_and_v2_layouts() {
        let v1 = "9:memory:/slurm/uid_1000/job_4242/step_0/task_0\n1:cpu:/\n";
        assert_eq!((parse(v1).slurm_job.as_deref(), parse(v1).slurm_uid), (Some("4242"), Some(1000)));
        let v2 = "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n";
        assert_eq!((parse(v2).slurm_job.as_deref(), parse(v2).slurm_uid), (Some("77"), None));
        assert_eq!(parse(v2).container, None);
        let node = "0::/system.slice/node1_slurmstepd.scope/job_78/step_0/user/task_0\n";
        assert_eq!(parse(node).slurm_job.as_deref(), Some("78"), "multiple slurmd: the node's own scope");
    }

    #[test]
    fn ids_in_a_users_own_cgroups_name_nothing() {
        let pod = "kubepods-burstable-pod1b2c3d4e_5f60_4a1b_8c9d_0e1f2a3b4c5d.slice";
        for forged in [
            format!("0::/user.slice/user-1001.slice/user@1001.service/app.slice/libpod-{ID}.scope\n"),
            format!("0::/user.slice/user-1001.slice/user@1001.service/{pod}/cri-containerd-{ID}.scope\n"),
            format!("0::/system.slice/{pod}/x\n"),
        ] {
            let ids = parse(&forged);
            assert_eq!(
                (ids.container.is_some() && forged.contains("user.slice"), ids.pod_uid),
                (false, None),
                "{forged}"
            );
        }
    }

    #[test]
    fn paths_seen_from_a_cgroup_namespace_of_its_own_keep_their_layout() {
        let pod = "kubepods-burstable-pod1b2c3d4e_5f60_4a1b_8c9d_0e1f2a3b4c5d.slice";
        let ids =
            parse(&format!("0::/../../kubepods.slice/kubepods-burstable.slice/{pod}/cri-containerd-{ID}.scope\n"));
        assert_eq!(ids.pod_uid.as_deref(), Some("1b2c3d4e-5f60-4a1b-8c9d-0e1f2a3b4c5d"));
        assert_eq!(ids.container.as_deref(), Some(ID));
        let ids = parse(&format!("0::/../../user.slice/user-1001.slice/user@1001.service/libpod-{ID}.scope\n"));
        assert_eq!(ids.container, None, "a user's own cgroups, seen from a namespace");
        let ids = parse("0::/../system.slice/slurmstepd.scope/job_77/step_0\n");
        assert_eq!(ids.slurm_job.as_deref(), Some("77"));
    }

    #[test]
    fn a_process_is_within_its_containers_cgroup_only() {
        let main = format!("0::/machine.slice/libpod-{ID}.scope/container\n");
        assert!(within(&main, &main, ID));
        assert!(within(&format!("0::/machine.slice/libpod-{ID}.scope/container/exec\n"), &main, ID));
        assert!(within(&format!("0::/machine.slice/libpod-{ID}.scope\n"), &main, ID), "the container's own scope");
        let forged = format!("0::/user.slice/user-1001.slice/user@1001.service/libpod-{ID}.scope\n");
        assert!(!within(&forged, &main, ID));
        assert!(!within(&format!("0::/machine.slice/libpod-{ID}.scopeX\n"), &main, ID));
        let v1 = format!("12:memory:/docker/{ID}\n11:pids:/docker/{ID}\n");
        assert!(within(&v1, &v1, ID));
        assert!(!within(&format!("12:memory:/docker/{ID}\n11:pids:/elsewhere\n"), &v1, ID), "every hierarchy");
        assert!(!within(&main, "0::/\n", ID), "a main process outside it says nothing");
    }

    #[test]
    fn a_job_folder_a_user_made_names_no_job() {
        for forged in [
            "0::/user.slice/user-1001.slice/user@1001.service/app.slice/job_4242\n",
            "0::/user.slice/user-1001.slice/user@1001.service/system.slice/slurmstepd.scope/job_4242\n",
            "9:memory:/user/slurm/uid_1000/job_4242\n",
            "9:memory:/slurm/job_4242/step_0\n",
            "0::/job_4242\n",
        ] {
            assert_eq!(parse(forged).slurm_job, None, "{forged}");
        }
    }

    #[test]
    fn nothing_is_made_up_from_a_plain_or_hostile_path() {
        for cgroup in [
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            "0::/job_\n0::/job_12x\n0::/podnotauid\n",
            "0::/docker-abc.scope\n",
            "garbage without colons",
            "",
        ] {
            assert_eq!(parse(cgroup), CgroupIds::default(), "{cgroup:?}");
        }
    }
}
