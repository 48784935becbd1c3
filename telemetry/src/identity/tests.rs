use std::fs;

use shared::Details;
use shared::workload::OwnerSource;

use shared::processes::GpuProcess;

use super::*;

const ID: &str = "3f4b1c2d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809";

/// A /proc with one process: its cgroup file and, when given, its environment.
fn fake_proc(root: &Path, pid: u32, cgroup: &str, environ: Option<&str>) {
    let dir = root.join(pid.to_string());
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("cgroup"), cgroup).unwrap();
    if let Some(environ) = environ {
        fs::write(dir.join("environ"), environ.replace(' ', "\0")).unwrap();
    }
}

fn identities(root: &Path) -> Identities {
    let config = IdentityConfig { proc_root: root.to_owned(), ..IdentityConfig::default() };
    Identities::start(config, &[shared::testing::device(0)]).unwrap()
}

fn details(processes: Vec<GpuProcess>) -> Details {
    Details { processes, ..Details::default() }
}

fn process(pid: u32, user: &str, started_ms: u64) -> GpuProcess {
    GpuProcess { user: Some(user.to_owned()), started_ms: Some(started_ms), ..shared::testing::process(0, pid) }
}

/// [`fake_proc`] with a `status` file naming the process's real uid.
fn fake_proc_of(root: &Path, pid: u32, uid: u32, cgroup: &str, environ: Option<&str>) {
    fake_proc(root, pid, cgroup, environ);
    fs::write(root.join(pid.to_string()).join("status"), format!("Name:\tpython3\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"))
        .unwrap();
}

#[test]
fn a_slurm_job_owns_its_process_from_the_environment_and_the_cgroup() {
    let root = tempfile::tempdir().unwrap();
    let env = "PATH=/bin SLURM_JOB_ID=4242 SLURM_JOB_USER=ana SLURM_JOB_UID=1000 SLURM_JOB_ACCOUNT=vision SLURM_JOB_PARTITION=gpu";
    fake_proc_of(root.path(), 10, 1000, "9:memory:/slurm/uid_1000/job_4242/step_0/task_0\n", Some(env));
    fake_proc(root.path(), 11, "0::/system.slice/slurmstepd.scope/job_77/step_0\n", None);
    let ids = identities(root.path());
    let mut d = details(vec![process(10, "ana", 1), process(11, "bo", 1)]);
    ids.attach(&mut d);
    let job = d.processes[0].workload.as_ref().and_then(|w| w.job.as_ref()).unwrap();
    assert_eq!(
        (job.id.as_str(), job.account.as_deref(), job.partition.as_deref(), job.verified),
        ("4242", Some("vision"), Some("gpu"), true)
    );
    assert_eq!(
        d.processes[0].owner.as_ref().map(|o| (o.name.as_str(), o.source)),
        Some(("ana", OwnerSource::SlurmJob))
    );
    // Without its environment, the cgroup still names the job; the Unix user owns it.
    let job = d.processes[1].workload.as_ref().and_then(|w| w.job.as_ref()).unwrap();
    assert_eq!((job.id.as_str(), job.user.as_deref(), job.verified), ("77", None, true));
    assert_eq!(d.processes[1].user_name(), "bo");
}

#[test]
fn a_slurm_job_only_the_environment_claims_names_no_owner() {
    let root = tempfile::tempdir().unwrap();
    let claim = "SLURM_JOB_ID=4242 SLURM_JOB_USER=ana SLURM_JOB_UID=1000";
    // bo (uid 1001) sets ana's job in his environment, outside any Slurm cgroup.
    fake_proc_of(root.path(), 30, 1001, "0::/user.slice/user-1001.slice/session-3.scope\n", Some(claim));
    // ... or in a job_4242 folder he made under his own delegated cgroup.
    let made = "0::/user.slice/user-1001.slice/user@1001.service/app.slice/job_4242\n";
    fake_proc_of(root.path(), 31, 1001, made, Some(claim));
    // ... or inside Slurm's real job 4242 of ana, as another uid (root's process in her job).
    fake_proc_of(root.path(), 32, 0, "9:memory:/slurm/uid_1000/job_4242/step_0\n", Some(claim));
    // ... or inside his own real job 99 with its id and his uid, but her name.
    let renamed = "SLURM_JOB_ID=99 SLURM_JOB_USER=ana SLURM_JOB_UID=1001";
    fake_proc_of(root.path(), 34, 1001, "9:memory:/slurm/uid_1001/job_99/step_0\n", Some(renamed));
    // ... or inside his own real job 99, claiming hers: his job, by id, is the truth.
    fake_proc_of(root.path(), 33, 1001, "9:memory:/slurm/uid_1001/job_99/step_0\n", Some(claim));
    let ids = identities(root.path());
    let listed = [(30, "bo"), (31, "bo"), (32, "root"), (33, "bo"), (34, "bo")];
    let mut d = details(listed.iter().map(|&(pid, user)| process(pid, user, 1)).collect());
    ids.attach(&mut d);
    let owner = |i: usize| d.processes[i].owner.as_ref().map(|o| (o.name.clone(), o.source)).unwrap();
    let job = |i: usize| d.processes[i].workload.as_ref().and_then(|w| w.job.clone()).unwrap();
    for i in 0..3 {
        assert_eq!((job(i).id.as_str(), job(i).verified), ("4242", false), "process {i}");
        assert_eq!(owner(i).1, OwnerSource::UnixUser, "process {i}");
    }
    assert_eq!((owner(0).0.as_str(), owner(2).0.as_str()), ("bo", "root"));
    assert_eq!((job(3).id.as_str(), job(3).user.as_deref(), job(3).verified), ("99", None, true));
    assert_eq!(owner(3), ("bo".to_owned(), OwnerSource::UnixUser));
    assert_eq!((job(4).id.as_str(), job(4).verified, owner(4).0.as_str()), ("99", false, "bo"), "his job, her name");
}

#[test]
fn a_container_without_an_engine_is_named_by_id_and_root_in_it_is_not_root() {
    let root = tempfile::tempdir().unwrap();
    fake_proc(root.path(), 20, &format!("0::/system.slice/docker-{ID}.scope\n"), None);
    let ids = identities(root.path());
    let mut d = details(vec![process(20, "root", 1)]);
    ids.attach(&mut d);
    let c = d.processes[0].workload.as_ref().and_then(|w| w.container.as_ref()).unwrap();
    assert_eq!((c.id.as_str(), c.runtime.as_deref(), c.name.as_deref()), ("3f4b1c2d5e6f", Some("docker"), None));
    assert_eq!(d.processes[0].user_name(), "container 3f4b1c2d5e6f");
    assert!(ids.problems().is_empty(), "no engine configured is no problem: {:?}", ids.problems());
}

#[test]
fn each_process_is_looked_at_once_and_a_reused_pid_afresh() {
    let root = tempfile::tempdir().unwrap();
    fake_proc(root.path(), 30, "0::/slurm/uid_0/job_1/step_0\n", None);
    let ids = identities(root.path());
    let job = |d: &Details| d.processes[0].workload.as_ref().and_then(|w| w.job.as_ref()).map(|j| j.id.clone());
    let mut first = details(vec![process(30, "ana", 1_000)]);
    ids.attach(&mut first);
    assert_eq!(job(&first).as_deref(), Some("1"));
    // What /proc says changes, but the same process (PID and start time) is not looked at again.
    fake_proc(root.path(), 30, "0::/slurm/uid_0/job_2/step_0\n", None);
    for _ in 0..5 {
        let mut again = details(vec![process(30, "ana", 1_000)]);
        ids.attach(&mut again);
        assert_eq!(job(&again).as_deref(), Some("1"), "cached by PID and start time");
    }
    // The PID is reused by a new process (another start time): looked at afresh, in its own job.
    let mut d = details(vec![process(30, "ana", 9_000)]);
    ids.attach(&mut d);
    assert_eq!(job(&d).as_deref(), Some("2"));
    // A process that exited between the NVML list and the look: nothing known, nothing made up.
    let mut gone = details(vec![process(31, "ana", 1)]);
    ids.attach(&mut gone);
    assert_eq!((gone.processes[0].workload.as_ref(), gone.processes[0].user_name()), (None, "ana"));
    // Entries of processes no longer listed are dropped.
    assert_eq!(lock(&ids.shared.cache).len(), 1);
}

#[test]
fn a_workload_the_source_already_knows_is_kept_and_owned() {
    let root = tempfile::tempdir().unwrap();
    // /proc would name a Slurm job: the source's own workload wins, and /proc is not read.
    fake_proc(root.path(), 40, "0::/slurm/uid_0/job_7/step_0\n", None);
    let ids = identities(root.path());
    let mut p = process(40, "root", 1);
    p.workload =
        Some(Workload { pod: Some(Pod { namespace: Some("ml".into()), ..Pod::default() }), ..Workload::default() });
    let mut d = details(vec![p]);
    ids.attach(&mut d);
    assert_eq!(d.processes[0].user_name(), "ml");
    assert_eq!(d.processes[0].workload.as_ref().and_then(|w| w.job.as_ref()), None, "no look at /proc");
}

#[test]
fn a_configured_engine_that_is_not_there_is_named_once() {
    let root = tempfile::tempdir().unwrap();
    fake_proc(root.path(), 50, &format!("0::/system.slice/docker-{ID}.scope\n"), None);
    let config = IdentityConfig {
        proc_root: root.path().to_owned(),
        container_socket: Some(root.path().join("docker.sock")),
        ..IdentityConfig::default()
    };
    let ids = Identities::start(config, &[]).unwrap();
    let mut d = details(vec![process(50, "root", 1)]);
    ids.attach(&mut d);
    assert_eq!(d.workload_problems.len(), 1, "{:?}", d.workload_problems);
    assert!(d.workload_problems[0].contains("container engine cannot be asked"), "{:?}", d.workload_problems);
    assert_eq!(d.processes[0].user_name(), "container 3f4b1c2d5e6f");
}

#[test]
fn gpus_of_pods_name_the_pod_of_containerized_processes_only() {
    let root = tempfile::tempdir().unwrap();
    fake_proc(
        root.path(),
        60,
        &format!("3:cpu:/kubepods/burstable/pod1b2c3d4e-5f60-4a1b-8c9d-0e1f2a3b4c5d/{ID}\n"),
        None,
    );
    fake_proc(root.path(), 61, "0::/user.slice/user-0.slice/session-1.scope\n", None);
    let ids = identities(root.path());
    let pod = Pod {
        namespace: Some("ml".into()),
        name: Some("bert-0".into()),
        container: Some("train".into()),
        uid: None,
        owner: None,
    };
    lock(&ids.shared.pods).insert("GPU-0".to_owned(), pod);
    let mut d = details(vec![process(60, "root", 1), process(61, "admin", 1)]);
    ids.attach(&mut d);
    let p = d.processes[0].workload.as_ref().and_then(|w| w.pod.as_ref()).unwrap();
    assert_eq!((p.name.as_deref(), p.uid.as_deref()), (Some("bert-0"), Some("1b2c3d4e-5f60-4a1b-8c9d-0e1f2a3b4c5d")));
    assert_eq!(d.processes[0].user_name(), "ml");
    assert_eq!((d.processes[1].workload.as_ref(), d.processes[1].user_name()), (None, "admin"));
}

#[test]
fn bad_flag_values_are_refused_with_what_is_allowed() {
    assert!(parse_socket("relative.sock").unwrap_err().contains("absolute path"));
    assert!(parse_socket(&format!("/{}", "x".repeat(200))).is_err());
    assert_eq!(parse_socket("/run/podman/podman.sock").unwrap(), PathBuf::from("/run/podman/podman.sock"));
    assert!(parse_label("").unwrap_err().contains("1 to 128"));
    assert!(parse_label("team name").is_err());
    assert_eq!(parse_label("example.com/owner").unwrap(), "example.com/owner");
}
