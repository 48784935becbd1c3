//! A Slurm job as its process's environment names it (`SLURM_JOB_ID`, `SLURM_JOB_USER`,
//! `SLURM_JOB_UID`, ...). Only root, or the process's own user, may read `/proc/<pid>/environ`.
//! Anyone can set these variables: what they say is a claim, which `identity` verifies against
//! the process's cgroup and uid before it names an owner.

use std::io::Read as _;
use std::path::Path;

use shared::workload::{SlurmJob, bounded};

/// Most bytes of an environment read: Slurm's variables come early, and a process may hold megabytes.
const MAX_ENVIRON: u64 = 256 << 10;

/// Why an environment could not be read (anything but "the process is gone").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvironError {
    /// Reading another user's environment needs root (or CAP_SYS_PTRACE).
    PermissionDenied,
}

/// What an environment claims of its Slurm job (never verified: see the module's words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The job, `verified` false.
    pub job: SlurmJob,
    /// `SLURM_JOB_UID`: the job's user's uid.
    pub uid: Option<u32>,
}

/// The Slurm job `/proc/<pid>/environ` under `proc_root` claims, if it claims one.
pub fn slurm_job(proc_root: &Path, pid: u32) -> Result<Option<Claim>, EnvironError> {
    let file = std::fs::File::open(proc_root.join(pid.to_string()).join("environ"));
    let mut raw = Vec::new();
    match file.and_then(|f| f.take(MAX_ENVIRON).read_to_end(&mut raw)) {
        Ok(_) => Ok(parse(&raw)),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(EnvironError::PermissionDenied),
        // Gone (it exited) or hidden: nothing to say.
        Err(_) => Ok(None),
    }
}

/// The Slurm variables of a NUL-separated environment; `None` without a numeric `SLURM_JOB_ID`.
pub fn parse(raw: &[u8]) -> Option<Claim> {
    let mut job = SlurmJob::default();
    let mut uid = None;
    for entry in raw.split(|&b| b == 0) {
        let entry = String::from_utf8_lossy(entry);
        let Some((key, value)) = entry.split_once('=') else { continue };
        let value = Some(bounded(value)).filter(|v| !v.is_empty());
        match key {
            "SLURM_JOB_ID" => job.id = value.unwrap_or_default(),
            "SLURM_JOB_USER" => job.user = value,
            "SLURM_JOB_ACCOUNT" => job.account = value,
            "SLURM_JOB_PARTITION" => job.partition = value,
            "SLURM_JOB_UID" => uid = value.and_then(|v| v.parse().ok()),
            _ => {}
        }
    }
    let numeric = !job.id.is_empty() && job.id.len() <= 20 && job.id.bytes().all(|b| b.is_ascii_digit());
    numeric.then_some(Claim { job, uid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_job_and_ignores_the_rest() {
        let raw = b"PATH=/usr/bin\0SLURM_JOB_ID=4242\0SLURM_JOB_USER=ana\0SLURM_JOB_UID=1001\0SLURM_JOB_ACCOUNT=vision\0SLURM_JOB_PARTITION=gpu\0X=1";
        let Claim { job, uid } = parse(raw).unwrap();
        assert_eq!((uid, job.verified), (Some(1001), false), "a claim, never verified here");
        assert_eq!(
            (job.id.as_str(), job.user.as_deref(), job.account.as_deref(), job.partition.as_deref()),
            ("4242", Some("ana"), Some("vision"), Some("gpu"))
        );
    }

    #[test]
    fn no_job_without_a_numeric_id_and_names_are_bounded() {
        assert_eq!(parse(b"SLURM_JOB_USER=ana\0"), None);
        assert_eq!(parse(b"SLURM_JOB_ID=12;rm\0"), None);
        assert_eq!(parse(b""), None);
        let long = format!("SLURM_JOB_ID=1\0SLURM_JOB_USER={}\u{202e}\0", "a".repeat(5000));
        let user = parse(long.as_bytes()).unwrap().job.user.unwrap();
        assert!(user.chars().count() <= shared::workload::MAX_TEXT && !user.contains('\u{202e}'));
    }

    #[test]
    fn our_own_environment_reads_and_a_missing_process_is_none() {
        let root = Path::new("/proc");
        assert!(slurm_job(root, std::process::id()).is_ok());
        assert_eq!(slurm_job(root, u32::MAX), Ok(None));
    }
}
