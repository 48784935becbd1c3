//! Signalling GPU processes (`--allow-signals`): which PIDs gpudash will signal at all, the
//! `kill(2)` itself, and watching the process go away. Who may signal whom is
//! [`shared::processes::may_signal`], which the web layer asks first and the page asks too.

use std::time::Duration;

use base::clock::Clock;

use shared::processes::{GpuProcess, PID_MAX, SIGNAL_WAIT_MS, Signal, shorten};

use telemetry::procfs::ProcReader;

/// How often a signalled process is looked for in /proc.
const POLL: Duration = Duration::from_millis(20);

/// Why a signal was not sent (or failed), with what the caller may do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignalError {
    #[error(
        "signalling processes is off on this server; start gpudash with --allow-signals to let admins (and \
         operators, for their own processes) send SIGTERM and SIGKILL to GPU processes"
    )]
    Off,
    #[error("'{0}' is not a PID; send a whole number from 2 to {PID_MAX}, e.g. /api/processes/4242/signal")]
    NotAPid(String),
    #[error("PID 0 is not a process (kill(0) would signal gpudash's own process group); PIDs go from 2 to {PID_MAX}")]
    PidZero,
    #[error("PID {0} is over the largest PID Linux hands out ({PID_MAX})")]
    PidTooBig(u64),
    #[error("PID 1 is the init system: gpudash never signals it")]
    Init,
    #[error("PID {0} is gpudash itself: stop it with its service manager, not from its own page")]
    Itself(u32),
    #[error(
        "PID {0} is not a GPU process in gpudash's latest sample; only processes listed in /api/processes may \
         be signalled (one that just started shows up within a few seconds)"
    )]
    NotGpu(u32),
    #[error(
        "PID {0}'s start time is unknown (/proc hides it), so gpudash cannot tell it from a reused PID; nothing was sent"
    )]
    StartUnknown(u32),
    #[error(
        "PID {pid} now belongs to another process (it started at {now_ms} ms, the GPU process at {sampled_ms} ms); nothing was sent"
    )]
    Reused { pid: u32, sampled_ms: u64, now_ms: u64 },
    #[error("PID {0} has already gone; nothing was sent")]
    Gone(u32),
    #[error("the OS refused: gpudash runs as '{server_user}' and may not signal '{owner}''s process (PID {pid})")]
    Denied { pid: u32, server_user: String, owner: String },
    #[error("sending {signal} to PID {pid} failed: {errno}")]
    Failed { pid: u32, signal: &'static str, errno: String },
}

/// The PID in a request path: a whole number from 1 to [`PID_MAX`] (PID 1 is refused later, as a target).
pub fn parse_pid(text: &str) -> Result<u32, SignalError> {
    let pid: u64 = text.parse().map_err(|_| SignalError::NotAPid(shorten(text, 40)))?;
    match pid {
        0 => Err(SignalError::PidZero),
        pid if pid > u64::from(PID_MAX) => Err(SignalError::PidTooBig(pid)),
        pid => Ok(pid as u32),
    }
}

/// The GPU process `pid` is in the latest sample `processes`, unless it is one gpudash never signals.
pub fn target(pid: u32, processes: &[GpuProcess]) -> Result<GpuProcess, SignalError> {
    if pid == 1 {
        return Err(SignalError::Init);
    }
    if pid == std::process::id() {
        return Err(SignalError::Itself(pid));
    }
    processes.iter().find(|p| p.pid == pid).cloned().ok_or(SignalError::NotGpu(pid))
}

/// Whether a process that started at `now_ms` (from /proc now) is the one sampled as started at
/// `sampled_ms`: the same to the clock tick, as both come from its start ticks and the one boot
/// time gpudash reads ([`ProcReader::new`]). A PID reused within the same second is told apart.
pub fn same_process(pid: u32, sampled_ms: Option<u64>, now_ms: Option<u64>) -> Result<(), SignalError> {
    let (Some(sampled_ms), Some(now_ms)) = (sampled_ms, now_ms) else {
        return Err(SignalError::StartUnknown(pid));
    };
    if sampled_ms != now_ms {
        return Err(SignalError::Reused { pid, sampled_ms, now_ms });
    }
    Ok(())
}

/// Sends `signal` to `process` if it is still the process sampled, then watches it for up to
/// [`SIGNAL_WAIT_MS`]: `Ok(true)` when it went away (or is a zombie) in that time. Blocks: call it
/// from `spawn_blocking`.
pub fn send(proc: &ProcReader, process: &GpuProcess, signal: Signal) -> Result<bool, SignalError> {
    let pid = process.pid;
    // The pidfd holds the process that has the PID now: checked below, signalled through it, so a
    // PID reused between the check and the signal is never signalled.
    let pidfd = open_pidfd(pid)?;
    let running = proc.running(pid).ok_or(SignalError::Gone(pid))?;
    same_process(pid, process.started_ms, running.started_ms)?;
    kill(pid, pidfd.as_ref(), signal).map_err(|errno| match errno {
        rustix::io::Errno::SRCH => SignalError::Gone(pid),
        rustix::io::Errno::PERM => SignalError::Denied {
            pid,
            server_user: proc.read(std::process::id()).user.unwrap_or_else(|| "an unknown user".to_owned()),
            owner: process.user.clone().unwrap_or_else(|| "an unknown user".to_owned()),
        },
        errno => SignalError::Failed { pid, signal: signal.name(), errno: errno.to_string() },
    })?;
    // A wait of real time (it sleeps), so on the system clock, never one a test could stop.
    let clock = Clock::system();
    let deadline = clock.now() + Duration::from_millis(SIGNAL_WAIT_MS);
    loop {
        if proc.running(pid).is_none_or(|now| now.started_ms != running.started_ms) {
            return Ok(true);
        }
        if clock.now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(POLL);
    }
}

/// A pidfd of `pid` (Linux 5.3 and later); `None` where the kernel has none (ENOSYS, or a sandbox
/// that refuses it), and then the signal goes by PID right after the check, as before pidfds.
fn open_pidfd(pid: u32) -> Result<Option<rustix::fd::OwnedFd>, SignalError> {
    let Some(raw) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else {
        return Err(SignalError::Gone(pid));
    };
    match rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::SRCH) => Err(SignalError::Gone(pid)),
        Err(_) => Ok(None),
    }
}

/// Sends `signal` through `pidfd`, else by `pid`; the PID was checked to be a positive one that
/// is not gpudash's.
fn kill(pid: u32, pidfd: Option<&rustix::fd::OwnedFd>, signal: Signal) -> Result<(), rustix::io::Errno> {
    let signal = match signal {
        Signal::Term => rustix::process::Signal::TERM,
        Signal::Kill => rustix::process::Signal::KILL,
    };
    if let Some(pidfd) = pidfd {
        return rustix::process::pidfd_send_signal(pidfd, signal);
    }
    let pid = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw).ok_or(rustix::io::Errno::SRCH)?;
    rustix::process::kill_process(pid, signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, started_ms: Option<u64>) -> GpuProcess {
        GpuProcess { user: Some("ana".to_owned()), started_ms, ..shared::testing::process(0, pid) }
    }

    #[test]
    fn pids_parse_within_linux_bounds() {
        assert_eq!(parse_pid("4242"), Ok(4242));
        assert_eq!(parse_pid("0"), Err(SignalError::PidZero));
        assert_eq!(parse_pid("4194305"), Err(SignalError::PidTooBig(4_194_305)));
        assert!(matches!(parse_pid("99999999999999999999"), Err(SignalError::NotAPid(_))));
        assert!(matches!(parse_pid("-1"), Err(SignalError::NotAPid(_))));
        assert!(matches!(parse_pid("abc"), Err(SignalError::NotAPid(_))));
    }

    #[test]
    fn init_itself_and_non_gpu_pids_are_no_targets() {
        let listed = [process(1, Some(1)), process(std::process::id(), Some(1)), process(4242, Some(1))];
        assert_eq!(target(1, &listed), Err(SignalError::Init));
        assert_eq!(target(std::process::id(), &listed), Err(SignalError::Itself(std::process::id())));
        assert_eq!(target(4243, &listed), Err(SignalError::NotGpu(4243)));
        assert_eq!(target(4242, &listed).map(|p| p.pid), Ok(4242));
    }

    #[test]
    fn a_reused_pid_is_told_by_its_start_time() {
        assert_eq!(same_process(7, Some(10_000), Some(10_000)), Ok(()));
        // A PID reused within the second the sampled process started in: another process all the same.
        assert!(matches!(same_process(7, Some(10_000), Some(10_010)), Err(SignalError::Reused { .. })));
        // Two readers of the host's /proc turn the same start ticks into the same ms.
        let own = std::process::id();
        let (a, b) = (ProcReader::new("/proc").running(own), ProcReader::new("/proc").running(own));
        assert_eq!(a.and_then(|r| r.started_ms), b.and_then(|r| r.started_ms));
        let reused = same_process(7, Some(10_000), Some(60_000)).unwrap_err();
        assert_eq!(reused.to_string().split(" (").next(), Some("PID 7 now belongs to another process"));
        assert_eq!(same_process(7, None, Some(1)), Err(SignalError::StartUnknown(7)));
    }

    #[test]
    fn a_sampled_process_whose_pid_was_reused_is_not_signalled() {
        let mut child = std::process::Command::new("sleep").arg("600").spawn().expect("spawn sleep");
        let proc = ProcReader::new("/proc");
        let started = proc.running(child.id()).and_then(|r| r.started_ms);
        // The sample saw another process under this PID a minute earlier.
        let stale = process(child.id(), started.map(|s| s - 60_000));
        let refused = send(&proc, &stale, Signal::Kill);
        assert!(matches!(refused, Err(SignalError::Reused { .. })), "{refused:?}");
        assert!(proc.running(child.id()).is_some(), "the new process was left alone");
        assert_eq!(send(&proc, &process(child.id(), started), Signal::Kill), Ok(true));
        child.wait().expect("reap sleep");
        assert_eq!(send(&proc, &process(child.id(), started), Signal::Term), Err(SignalError::Gone(child.id())));
    }
}
