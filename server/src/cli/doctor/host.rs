//! The doctor's checks of the host: whether gpudash sees other users' processes, and which
//! workload sources (a container engine, the kubelet, Slurm) are there and answer.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use super::Check;
use telemetry::identity::{API_TIMEOUT, IdentityArgs, IdentityConfig, cgroup, engine, environ, kubelet};

/// What `/proc/self/status` says of gpudash's own process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct SelfStatus {
    /// Its PID in each PID namespace, outermost first (`NSpid`): more than one means it runs in a
    /// namespace of its own. `None` on kernels before 4.1, which do not say.
    pub pid_namespaces: Option<usize>,
    pub euid: Option<u32>,
    /// Its effective group and supplementary groups.
    pub groups: Vec<u32>,
}

/// Reads the `NSpid`, `Uid`, `Gid` and `Groups` lines of a `/proc/PID/status` text.
pub(super) fn parse_status(status: &str) -> SelfStatus {
    let mut parsed = SelfStatus::default();
    for line in status.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let mut numbers = value.split_whitespace().filter_map(|n| n.parse::<u32>().ok());
        match key {
            "NSpid" => parsed.pid_namespaces = Some(value.split_whitespace().count()),
            "Uid" => parsed.euid = numbers.nth(1),
            "Gid" => parsed.groups.extend(numbers.nth(1)),
            "Groups" => parsed.groups.extend(numbers),
            _ => {}
        }
    }
    parsed
}

/// `/proc`'s `hidepid=` (when it hides anything) and `gid=` options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HidePid {
    pub mode: String,
    /// The group exempt from hiding.
    pub gid: Option<u32>,
}

/// The `hidepid` of the proc file system mounted on `/proc`, from a `/proc/self/mountinfo` text
/// (the last mount on `/proc` is the one seen); `None` when it hides nothing.
pub(super) fn parse_hidepid(mountinfo: &str) -> Option<HidePid> {
    let line = mountinfo.lines().rfind(|line| line.split_whitespace().nth(4) == Some("/proc"))?;
    // ID PARENT MAJ:MIN ROOT MOUNT OPTIONS [OPTIONAL…] - TYPE SOURCE SUPER-OPTIONS
    let (mount, tail) = line.split_once(" - ")?;
    let mut tail = tail.split_whitespace();
    if tail.next() != Some("proc") {
        return None;
    }
    let options = mount.split_whitespace().nth(5).into_iter().chain(tail.nth(1));
    let options: Vec<&str> = options.flat_map(|o| o.split(',')).collect();
    let value = |key: &str| options.iter().find_map(|o| o.strip_prefix(key)?.strip_prefix('='));
    let mode = value("hidepid").filter(|m| !matches!(*m, "0" | "off"))?;
    Some(HidePid { mode: mode.to_owned(), gid: value("gid").and_then(|g| g.parse().ok()) })
}

/// Whether this process runs in a container, by the marks engines leave and its cgroup path.
fn in_container() -> bool {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let ids = cgroup::parse(&cgroup);
    Path::new("/.dockerenv").exists()
        || Path::new("/run/.containerenv").exists()
        || ids.container.is_some()
        || ids.pod_uid.is_some()
}

/// Whether gpudash sees every user's processes, which it needs to name a GPU process's user,
/// command and workload.
pub(super) fn processes() -> Check {
    let status = parse_status(&std::fs::read_to_string("/proc/self/status").unwrap_or_default());
    let hidepid = parse_hidepid(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
    let container = in_container();
    visibility(&status, hidepid.as_ref(), container)
}

/// The processes check from what was read (pure, for the tests).
pub(super) fn visibility(status: &SelfStatus, hidepid: Option<&HidePid>, container: bool) -> Check {
    let own_namespace = match status.pid_namespaces {
        Some(n) => n > 1,
        // An old kernel does not say: a container is most likely in a namespace of its own.
        None => container,
    };
    let root = status.euid == Some(0);
    let exempt = hidepid.and_then(|h| h.gid).is_some_and(|gid| status.groups.contains(&gid));
    let hidden = hidepid.filter(|_| !root && !exempt);
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    if own_namespace {
        problems.push(
            "gpudash runs in a PID namespace of its own (a container without the host's PIDs): it sees only its own \
             processes, so the GPU processes NVML lists show without user, command or container",
        );
        fixes.push("docker/podman run --pid=host …; Kubernetes: hostPID: true in the pod spec");
    }
    if let Some(h) = hidden {
        problems.push(
            "/proc is mounted with hidepid: other users' processes are hidden from gpudash, so their GPU \
             processes show without user or command",
        );
        fixes.push(if h.gid.is_some() {
            "run gpudash in the group of /proc's gid= (SupplementaryGroups= in its unit), or as root"
        } else {
            "drop hidepid (mount -o remount,hidepid=0 /proc), or add gid=GROUP to /proc's options and run gpudash in \
             that group, or run it as root"
        });
    }
    if problems.is_empty() {
        let place = if container { "a container sharing the host's PIDs" } else { "the host's PID namespace" };
        let proc = match hidepid {
            Some(h) => format!(
                "/proc has hidepid={}, which {} is exempt from",
                h.mode,
                if root { "root" } else { "its group" }
            ),
            None => "/proc without hidepid".to_owned(),
        };
        return Check::ok("processes", format!("every user's processes are visible ({place}, {proc})"));
    }
    let summary = if problems.len() == 1 {
        problems[0].split(':').next().unwrap_or_default().to_owned()
    } else {
        "gpudash sees only some processes: it runs in a PID namespace of its own and /proc has hidepid".to_owned()
    };
    let mode =
        hidden.map(|h| format!("\n(hidepid={}{})", h.mode, h.gid.map(|g| format!(",gid={g}")).unwrap_or_default()));
    Check::warn("processes", summary, fixes.join("; and ")).with_detail(format!(
        "{}{}",
        problems.join("\n"),
        mode.unwrap_or_default()
    ))
}

/// The container engine, the kubelet's pod-resources API and Slurm, found as the server finds them.
pub(super) async fn workload_sources(args: &IdentityArgs) -> Vec<Check> {
    let config = IdentityConfig::from_args(args);
    let given = (args.container_socket.is_some(), args.pod_resources_socket.is_some());
    let (engine, pods) = tokio::join!(
        container_engine(config.container_socket.as_deref(), given.0),
        pod_resources(config.pod_resources_socket.as_deref(), given.1)
    );
    vec![engine, pods, slurm()]
}

/// The Docker Engine API (Docker's, or Podman's service), for containers' names, images and labels.
pub(super) async fn container_engine(socket: Option<&Path>, given: bool) -> Check {
    let Some(socket) = socket else {
        return Check::skip(
            "container-engine",
            format!("no container engine socket ({}): containers show by id only", engine::DEFAULT_SOCKETS.join(", ")),
        );
    };
    let shown = socket.display();
    let fix = format!(
        "check that the engine runs (`systemctl status docker`, or `podman system service`) and that gpudash's user \
         may use {shown} (root, or the docker group); in a container, mount it: -v {shown}:{shown}:ro"
    );
    if !socket.exists() {
        let summary = format!("--container-socket {shown} does not exist: containers show by id only");
        return if given {
            Check::warn("container-engine", summary, fix)
        } else {
            Check::skip("container-engine", summary)
        };
    }
    let answer = match engine::Engine::new(socket, API_TIMEOUT) {
        Ok(engine) => engine.version().await,
        Err(e) => Err(e),
    };
    let me = rustix::process::geteuid().as_raw();
    match answer {
        Ok(version) => match engine::socket_trust(socket, me) {
            Ok(()) => Check::ok(
                "container-engine",
                format!(
                    "{version} answers at {shown}, a socket root controls: containers are named, owner labels believed"
                ),
            ),
            Err(why) => Check::warn(
                "container-engine",
                format!(
                    "{version} answers at {shown}, but the socket is not root's ({why}): its containers' owner labels \
                     are not believed, as their user could write anyone's name there"
                ),
                "point --container-socket at the root engine's socket (/var/run/docker.sock, /run/podman/podman.sock); \
                 a rootless engine's containers stay owned by their Unix user",
            ),
        },
        Err(e) => Check::warn(
            "container-engine",
            format!("the container engine at {shown} does not answer ({e}): containers show by id only"),
            fix,
        ),
    }
}

/// The kubelet's pod-resources API, for the pod holding each GPU.
pub(super) async fn pod_resources(socket: Option<&Path>, given: bool) -> Check {
    let Some(socket) = socket else {
        return Check::skip(
            "pod-resources",
            format!("no kubelet pod-resources socket ({}): not a Kubernetes node", kubelet::DEFAULT_SOCKET),
        );
    };
    let shown = socket.display();
    let fix = format!(
        "on a Kubernetes node, mount the kubelet's socket directory (hostPath /var/lib/kubelet/pod-resources) and \
         give gpudash read access to {shown} (root)"
    );
    if !socket.exists() {
        let summary = format!("--pod-resources-socket {shown} does not exist: pods show by UID only");
        return if given { Check::warn("pod-resources", summary, fix) } else { Check::skip("pod-resources", summary) };
    }
    match kubelet::gpu_pods(socket, API_TIMEOUT).await {
        Ok(pods) => Check::ok(
            "pod-resources",
            format!(
                "the kubelet answers List at {shown}: {} GPU(s) given to pods now; a pod names only processes whose \
                 cgroup is a pod's (its UID checked when the API server answers), and the Lab keeps off those GPUs \
                 unless an admin forces a run",
                pods.len()
            ),
        ),
        Err(e) => Check::warn(
            "pod-resources",
            format!("the kubelet's pod-resources API at {shown} does not answer ({e}): pods show by UID only"),
            fix,
        ),
    }
}

/// Slurm: present (its configuration, or slurmd running), and whether jobs' environments can be read.
fn slurm() -> Check {
    let conf = std::env::var_os("SLURM_CONF").map_or_else(|| "/etc/slurm/slurm.conf".into(), std::path::PathBuf::from);
    let slurmd = running("slurmd");
    if !conf.exists() && !slurmd {
        return Check::skip("slurm", format!("no Slurm here (no {}, no slurmd running)", conf.display()));
    }
    let found = if slurmd { "slurmd runs" } else { "slurm.conf is there" };
    if can_read_others_environ() {
        Check::ok("slurm", format!("{found}; jobs' users, accounts and partitions can be read from /proc/PID/environ"))
    } else {
        Check::warn(
            "slurm",
            format!(
                "{found}, but gpudash cannot read other users' /proc/PID/environ: jobs show by id only, owned by their Unix user"
            ),
            "run gpudash as root, or give it CAP_SYS_PTRACE (the packaged service runs as a dynamic user with no \
             capabilities: a drop-in with AmbientCapabilities=CAP_SYS_PTRACE and CapabilityBoundingSet=CAP_SYS_PTRACE)",
        )
    }
}

/// Whether a process named `name` is running (visible in /proc).
fn running(name: &str) -> bool {
    pids().any(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == name))
}

fn pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc").into_iter().flatten().filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
}

/// Tries another user's process's environment, as the identity code reads it; without one in
/// sight, root can.
fn can_read_others_environ() -> bool {
    let me = rustix::process::geteuid().as_raw();
    let other = pids().find(|pid| std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() != me));
    match other {
        Some(pid) => environ::slurm_job(Path::new("/proc"), pid).is_ok(),
        None => me == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::*;

    const MOUNTINFO: &str = "\
22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
25 22 0:22 / /proc/sys/fs/binfmt_misc rw,relatime shared:13 - autofs systemd-1 rw,fd=29
";

    #[test]
    fn doctor_reads_hidepid_from_mountinfo() {
        assert_eq!(parse_hidepid(MOUNTINFO), None);
        let hidden = MOUNTINFO.replace("proc proc rw\n", "proc proc rw,hidepid=2,gid=1001\n");
        assert_eq!(parse_hidepid(&hidden), Some(HidePid { mode: "2".into(), gid: Some(1001) }));
        // Newer kernels write the mount's options by name, and the last mount on /proc wins.
        let stacked =
            format!("{MOUNTINFO}40 22 0:40 / /proc rw,relatime - proc proc rw,hidepid=invisible,subset=pid\n");
        assert_eq!(parse_hidepid(&stacked), Some(HidePid { mode: "invisible".into(), gid: None }));
        assert_eq!(parse_hidepid(&MOUNTINFO.replace("proc proc rw\n", "proc proc rw,hidepid=off\n")), None);
        assert_eq!(parse_hidepid("not a mountinfo"), None);
    }

    #[test]
    fn doctor_reads_the_pid_namespace_and_groups_from_status() {
        let host = "Name:\tgpudash\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t27 1001 \nNSpid:\t4242\n";
        assert_eq!(
            parse_status(host),
            SelfStatus { pid_namespaces: Some(1), euid: Some(1000), groups: vec![1000, 27, 1001] }
        );
        let nested = "Uid:\t0\t0\t0\t0\nGroups:\t\nNSpid:\t4242\t7\n";
        assert_eq!(parse_status(nested).pid_namespaces, Some(2));
        assert_eq!(parse_status("Uid:\t0\t0\t0\t0\n").pid_namespaces, None);
    }

    #[test]
    fn doctor_warns_when_other_users_processes_are_hidden() {
        let user = SelfStatus { pid_namespaces: Some(1), euid: Some(1000), groups: vec![1000] };
        assert_eq!(visibility(&user, None, false).status, Status::Ok);
        let hidepid = HidePid { mode: "2".into(), gid: Some(1001) };
        let check = visibility(&user, Some(&hidepid), false);
        assert_eq!(check.status, Status::Warn);
        assert!(check.summary.contains("hidepid") && check.fix.as_deref().unwrap().contains("gid="), "{check:?}");
        // The exempt group, or root, sees everything.
        let in_group = SelfStatus { groups: vec![1000, 1001], euid: Some(1000), pid_namespaces: Some(1) };
        assert_eq!(visibility(&in_group, Some(&hidepid), false).status, Status::Ok);
        let root = SelfStatus { euid: Some(0), ..user };
        assert_eq!(visibility(&root, Some(&hidepid), false).status, Status::Ok);
        // A container without --pid=host.
        let nested = SelfStatus { pid_namespaces: Some(2), ..root.clone() };
        let check = visibility(&nested, None, true);
        assert_eq!(check.status, Status::Warn);
        assert!(check.fix.as_deref().unwrap().contains("--pid=host") && check.fix.unwrap().contains("hostPID: true"));
        let shared_pids = visibility(&root, None, true);
        assert!(shared_pids.status == Status::Ok && shared_pids.summary.contains("container"), "{shared_pids:?}");
    }

    #[tokio::test]
    async fn doctor_asks_the_container_engine_and_names_one_that_does_not_answer() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("engine.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        // A stand-in engine answering one /version, as Docker does.
        std::thread::spawn(move || {
            use std::io::{Read as _, Write as _};
            let Ok((mut stream, _)) = listener.accept() else { return };
            let mut request = Vec::new();
            let mut buf = [0; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let body = r#"{"Platform":{"Name":"Docker Engine - Community"},"Version":"27.3.1","ApiVersion":"1.47"}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        });
        let check = container_engine(Some(&socket), true).await;
        assert_eq!(check.status, Status::Ok, "{check:?}");
        assert!(check.summary.starts_with("Docker Engine - Community 27.3.1 (API 1.47) answers"), "{check:?}");
        // Nobody listens any more: a broken source warns, it is not a blocker.
        let check = container_engine(Some(&socket), true).await;
        assert_eq!(check.status, Status::Warn, "{check:?}");
        assert!(check.summary.contains("does not answer"), "{check:?}");
        let missing = dir.path().join("none.sock");
        assert_eq!(container_engine(Some(&missing), true).await.status, Status::Warn);
        assert_eq!(container_engine(None, false).await.status, Status::Skip);
    }
}
