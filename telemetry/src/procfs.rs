//! What /proc says about a GPU process: Unix user, command, start time (its workload: `identity`);
//! and the one parser of `/proc/<pid>/stat` in the tree (the load tests use it too).
//!
//! Four small files per process are read by hand rather than through the
//! `procfs` crate, which would bring far more than these few lines need.

use std::path::{Path, PathBuf};

/// /proc facts about one process; every field is `None` when /proc hides it
/// (another PID namespace, or the process just exited).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcInfo {
    pub user: Option<String>,
    pub name: Option<String>,
    pub command: Option<String>,
    pub started_ms: Option<u64>,
    /// Its process group (field 5 of `/proc/<pid>/stat`).
    pub group: Option<u32>,
}

/// Clock ticks per second of the times in `/proc/<pid>/stat` (USER_HZ, `sysconf(_SC_CLK_TCK)`),
/// as the kernel tells every process at start; 100 on the architectures NVIDIA supports, never 0.
pub fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

/// The fields of `/proc/<pid>/stat` gpudash reads; times in clock ticks ([`clock_ticks_per_second`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidStat<'a> {
    /// The executable name (field 2, between the parentheses).
    pub comm: &'a str,
    /// CPU time in user mode (field 14).
    pub utime: u64,
    /// CPU time in kernel mode (field 15).
    pub stime: u64,
    /// When the process started, after boot (field 22).
    pub starttime: u64,
    /// Its process group (field 5).
    pub pgrp: u32,
}

/// Parses one `/proc/<pid>/stat` line; `None` when it is cut short or not one.
pub fn parse_pid_stat(stat: &str) -> Option<PidStat<'_>> {
    // Fields after the command start at field 3 (state): field N is the (N - 3)th of them.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse().ok();
    Some(PidStat {
        comm: comm(stat)?,
        pgrp: fields.get(5 - 3)?.parse().ok()?,
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
    })
}

/// A process that has not exited (see [`ProcReader::running`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Running {
    pub started_ms: Option<u64>,
}

/// The state letter of a `/proc/<pid>/stat` line (field 3: R, S, D, Z for a zombie...).
fn pid_state(stat: &str) -> Option<char> {
    stat.get(stat.rfind(')')? + 1..)?.split_whitespace().next()?.chars().next()
}

/// Reads processes under a /proc root (the real one, or a fixture in tests).
#[derive(Debug, Clone)]
pub struct ProcReader {
    root: PathBuf,
    boot_ms: Option<u64>,
    ticks_per_s: u64,
}

impl ProcReader {
    /// The host's /proc reads its boot time once per gpudash process, so every reader turns a
    /// process's start ticks into the same ms: the sampler's and the signal check's agree to the
    /// tick, whatever clock steps the kernel has made to `btime` since (a fixture root reads its own).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        static HOST_BOOT_MS: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        let root = root.into();
        let read = |root: &Path| std::fs::read_to_string(root.join("stat")).ok().and_then(|s| boot_time_ms(&s));
        let boot_ms = if root == Path::new("/proc") { *HOST_BOOT_MS.get_or_init(|| read(&root)) } else { read(&root) };
        Self { root, boot_ms, ticks_per_s: clock_ticks_per_second() }
    }

    pub fn read(&self, pid: u32) -> ProcInfo {
        let dir = self.root.join(pid.to_string());
        let read = |name: &str| std::fs::read(dir.join(name)).ok();
        let status = read("status").map(|b| String::from_utf8_lossy(&b).into_owned());
        let stat = read("stat").map(|b| String::from_utf8_lossy(&b).into_owned());
        ProcInfo {
            user: status.as_deref().and_then(uid).map(user_name),
            // Shown as `shared::text::shown` keeps names: no bidi overrides, no zero-width characters.
            name: stat.as_deref().and_then(comm).map(shared::text::shown),
            command: read("cmdline").and_then(|b| command_line(&b)),
            started_ms: stat
                .as_deref()
                .and_then(parse_pid_stat)
                .and_then(|s| Some(self.boot_ms? + s.starttime * 1000 / self.ticks_per_s)),
            group: stat.as_deref().and_then(parse_pid_stat).map(|s| s.pgrp).filter(|&g| g > 0),
        }
    }

    /// Whether `pid` runs now, and since when (ms since the epoch, as [`ProcInfo::started_ms`]):
    /// `None` once it has exited, zombies included (dead, waiting for their parent to reap them).
    pub fn running(&self, pid: u32) -> Option<Running> {
        let stat = std::fs::read(self.root.join(pid.to_string()).join("stat")).ok()?;
        let stat = String::from_utf8_lossy(&stat);
        if matches!(pid_state(&stat)?, 'Z' | 'X' | 'x') {
            return None;
        }
        let started_ms =
            parse_pid_stat(&stat).and_then(|s| Some(self.boot_ms? + s.starttime * 1000 / self.ticks_per_s));
        Some(Running { started_ms })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

fn boot_time_ms(stat: &str) -> Option<u64> {
    stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse::<u64>().ok().map(|s| s * 1000)
}

/// The real uid from the `Uid:` line of /proc/<pid>/status.
pub(crate) fn uid(status: &str) -> Option<u32> {
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

/// The user's name (through NSS, so LDAP users resolve too), or the uid itself.
fn user_name(uid: u32) -> String {
    uzers::get_user_by_uid(uid).map_or_else(|| uid.to_string(), |u| u.name().to_string_lossy().into_owned())
}

/// The executable name between the parentheses of /proc/<pid>/stat (it may contain spaces and parentheses).
fn comm(stat: &str) -> Option<&str> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    stat.get(open + 1..close)
}

fn command_line(raw: &[u8]) -> Option<String> {
    let parts: Vec<String> =
        raw.split(|&b| b == 0).filter(|p| !p.is_empty()).map(|p| String::from_utf8_lossy(p).into_owned()).collect();
    (!parts.is_empty()).then(|| shared::text::shown(&parts.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (python3 (train)) S 1 4242 4242 0 -1 4194560 100 0 0 0 50 10 0 0 20 0 8 0 123456 1000000 200 18446744073709551615";

    #[test]
    fn parses_stat_status_and_cmdline() {
        assert_eq!(comm(STAT), Some("python3 (train)"));
        assert_eq!(
            parse_pid_stat(STAT),
            Some(PidStat { comm: "python3 (train)", pgrp: 4242, utime: 50, stime: 10, starttime: 123_456 })
        );
        assert_eq!(parse_pid_stat("4242 (python3) S 1 4242"), None, "cut short");
        assert_eq!(uid("Name:\tpython3\nUid:\t1001\t1001\t1001\t1001\n"), Some(1001));
        assert_eq!(command_line(b"python3\0train.py\0--bs\x0032\0"), Some("python3 train.py --bs 32".to_owned()));
        assert_eq!(command_line(b""), None);
        assert_eq!(command_line("gpt\u{202E}hs.py\0-v".as_bytes()), Some("gpths.py -v".to_owned()));
        assert_eq!(boot_time_ms("cpu 1 2 3\nbtime 1700000000\n"), Some(1_700_000_000_000));
    }

    #[test]
    fn clock_ticks_come_from_the_kernel() {
        // USER_HZ is 100 on x86-64 and arm64; what matters is that it is read, not assumed.
        let hz = clock_ticks_per_second();
        assert!((1..=10_000).contains(&hz), "{hz}");
        if cfg!(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))) {
            assert_eq!(hz, 100);
        }
    }

    #[test]
    fn zombies_and_missing_processes_are_not_running() {
        assert_eq!(pid_state(STAT), Some('S'));
        assert_eq!(pid_state("9 (a) b) Z 1 9"), Some('Z'));
        let reader = ProcReader::new("/proc");
        assert_eq!(reader.running(u32::MAX), None);
        let me = reader.running(std::process::id()).expect("this process runs");
        assert_eq!(me.started_ms, reader.read(std::process::id()).started_ms);
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        let deadline = base::clock::Deadline::after(std::time::Duration::from_secs(10));
        // `true` exits at once and stays a zombie until it is waited for.
        while reader.read(pid).name.is_some()
            && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| pid_state(&s) != Some('Z'))
        {
            assert!(!deadline.passed(), "`true` did not exit");
            std::thread::yield_now();
        }
        assert_eq!(reader.running(pid), None, "a zombie has exited");
        child.wait().expect("reap");
        assert_eq!(reader.running(pid), None);
    }

    #[test]
    fn a_hidden_process_reads_as_all_none() {
        let reader = ProcReader::new("/proc");
        assert_eq!(reader.read(u32::MAX), ProcInfo::default());
    }

    #[test]
    fn reads_this_very_process() {
        let reader = ProcReader::new("/proc");
        let me = reader.read(std::process::id());
        assert!(me.user.is_some() && me.name.is_some() && me.command.is_some(), "{me:?}");
        let started = me.started_ms.unwrap();
        let now = crate::now_ms();
        assert!(started <= now + 1000 && started + 3_600_000 > now, "started {started}, now {now}");
    }
}
