//! Faults the simulator injects (`--simulate-fault`), so tests and demos show how gpudash copes:
//! one for every state the page or an alert can show.
//!
//! The syntax is `KIND:INDEX@START[+LENGTH]`: the fault strikes GPU INDEX START after the
//! first sample and holds for LENGTH, or for good without `+LENGTH`. What a fault does to the
//! GPU's readings is in [`effects`].

pub(super) mod effects;
#[cfg(test)]
mod tests;

/// When a fault holds, relative to the first sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start_ms: u64,
    /// How long it holds; `None`: for good.
    pub length_ms: Option<u64>,
}

impl Window {
    /// When it begins, ms since the epoch, when sampling began at `first_ms`.
    pub fn start(&self, first_ms: u64) -> u64 {
        first_ms.saturating_add(self.start_ms)
    }

    /// When it ends, ms since the epoch; `None`: never.
    pub fn end(&self, first_ms: u64) -> Option<u64> {
        self.length_ms.map(|length| self.start(first_ms).saturating_add(length))
    }

    /// Whether it has begun by `now_ms`.
    pub fn begun(&self, first_ms: u64, now_ms: u64) -> bool {
        now_ms >= self.start(first_ms)
    }

    /// Whether it holds at `now_ms`.
    pub fn holds(&self, first_ms: u64, now_ms: u64) -> bool {
        self.begun(first_ms, now_ms) && self.end(first_ms).is_none_or(|end| now_ms < end)
    }

    /// Whether it has ended by `now_ms`.
    pub fn ended(&self, first_ms: u64, now_ms: u64) -> bool {
        self.end(first_ms).is_some_and(|end| now_ms >= end)
    }
}

/// A process a `job` fault runs: who, how much memory, what SM share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedJob {
    /// Whom it is for: its Unix user, or the owner its workload names.
    pub user: String,
    /// `USER@container:NAME`, `USER@pod:NAMESPACE/NAME` or `USER@slurm:JOBID`: where it runs.
    pub workload: Option<Box<shared::workload::Workload>>,
    /// Device memory it holds, GiB.
    pub gib: u64,
    /// Its SM utilization in percent; `None`: it runs no kernel (NVML gives no figure).
    pub sm_util: Option<u32>,
    /// A spin loop (`:spin` after SM): a stream of tiny kernels keeps "util" at SM % while the SMs
    /// stay nearly idle (SM activity ~0, power near idle). Without it the GPU's SM activity, power
    /// and temperature follow its util as a real job's would.
    pub spin: bool,
}

/// A fault the simulator injects, for tests and demos of how gpudash copes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// GPU `device` stops answering (like XID 79, fallen off the bus); it answers again, reset
    /// and without its processes, when the window ends.
    Lost { device: u32, window: Window },
    /// Every lab run on GPU `device` observes a wrong result (a flipped byte in a copy, a wrong GEMM
    /// element, a pool that cached nothing, a wrong stream output), so its correctness checks fail.
    WrongResult { device: u32 },
    /// The GPU overheats: its temperature ramps to [`effects::HOT_PEAK`] °C, with thermal slowdown
    /// above [`effects::THERMAL_SLOWDOWN`] °C, and cools back when the window ends.
    Hot { device: u32, window: Window },
    /// The GPU runs warm: its temperature ramps to [`effects::WARM_PEAK`] °C, near its slowdown
    /// threshold but short of it (no slowdown), and cools back when the window ends.
    Warm { device: u32, window: Window },
    /// The board's hardware power brake holds the SM clock down.
    PowerBrake { device: u32, window: Window },
    /// The board draws its power limit: the driver caps its clocks and reports `sw_power_cap`.
    PowerCap { device: u32, window: Window },
    /// The driver logs one XID of `code` at `at_ms` after the first sample.
    Xid { device: u32, code: u64, at_ms: u64 },
    /// An uncorrectable ECC error with a row remap pending, until a reset (the window's end).
    Ecc { device: u32, window: Window },
    /// The GPU's memory fills to [`effects::MEMORY_FULL`] of its total.
    MemoryFull { device: u32, window: Window },
    /// The GPU runs a busy job until the window begins; then its processes exit and it stays
    /// free until the window ends (a new job starts then).
    JobEnds { device: u32, window: Window },
    /// A notebook holds memory on the GPU and computes nothing while the window holds; nothing
    /// else runs there meanwhile. It exits when the window ends.
    IdleHolder { device: u32, window: Window },
    /// A busy job runs whose process gpudash cannot see (as from a PID namespace of its own): its
    /// memory and utilization say the GPU is in use, and no process is listed while the window
    /// holds. The job ends with the window.
    Unseen { device: u32, window: Window },
    /// A real process of this host (one a test started, say) is listed as a compute process on
    /// GPU `device`, with its user, command and start time from /proc, until it exits: so the
    /// real path of `POST /api/processes/{pid}/signal` can be tested without a GPU.
    HostProcess { device: u32, pid: u32 },
    /// A scripted process runs on GPU `device` over exactly the window (so a test knows what
    /// usage to expect); a GPU with scripted jobs runs nothing else.
    Job { device: u32, job: ScriptedJob, window: Window },
}

/// A `--simulate-fault` value the simulator does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a fault; the simulator knows, with START after the first sample and an optional +LENGTH \
     after which the fault ends (without it, it lasts): lost:INDEX@DELAY[+LENGTH] (e.g. lost:1@30s: GPU 1 \
     falls off the bus after 30 s), hot:INDEX@START[+LENGTH] (temperature ramps to 92 °C, thermal \
     slowdown), warm:INDEX@START[+LENGTH] (temperature settles at 84 °C, near the 87 °C slowdown), \
     power-brake:INDEX@START[+LENGTH] (hardware power brake, SM clock drops), \
     power-cap:INDEX@START[+LENGTH] (power draw at the limit, clocks capped: sw_power_cap), \
     xid:INDEX:CODE@START (the driver logs XID CODE once, e.g. xid:0:13@5s), ecc:INDEX@START[+LENGTH] \
     (uncorrectable ECC error, row remap pending until a reset), memory-full:INDEX@START[+LENGTH] (memory \
     98 % used), job-ends:INDEX@START[+LENGTH] (its busy job exits; the GPU stays free), \
     idle-holder:INDEX@START[+LENGTH] (a notebook holds memory and computes nothing), \
     unseen:INDEX@START[+LENGTH] (a busy job whose process gpudash cannot see: in use, no process listed), \
     pid:INDEX:PID (this host's process PID is listed as a compute process on GPU INDEX until it exits, \
     e.g. pid:0:12345), and \
     job:INDEX:USER:GIB[:SM[:spin]]@START+LENGTH (a process of USER holds GIB GiB at SM % for exactly that \
     window, e.g. job:0:ana:4:50@2s+10s; without SM it runs no kernel; with :spin it is a spin loop of tiny \
     kernels, util high and SM activity ~0; nothing else runs on that GPU; USER@container:NAME, \
     USER@pod:NAMESPACE/NAME or USER@slurm:JOBID runs it there, e.g. job:0:ana@slurm:4242:4:50@2s+10s), and \
     wrong-result:INDEX (e.g. wrong-result:0: GPU 0's lab runs produce wrong results, so their checks fail)"
)]
pub struct FaultError(pub String);

impl std::str::FromStr for Fault {
    type Err = FaultError;

    /// `KIND:INDEX@START[+LENGTH]`, `xid:INDEX:CODE@START`, `pid:INDEX:PID` or `wrong-result:INDEX`.
    fn from_str(text: &str) -> Result<Self, FaultError> {
        let usage = || FaultError(text.to_owned());
        let (kind, rest) = text.trim().split_once(':').ok_or_else(usage)?;
        if kind == "wrong-result" {
            return Ok(Fault::WrongResult { device: rest.parse().map_err(|_| usage())? });
        }
        if kind == "pid" {
            let (device, pid) = rest.split_once(':').ok_or_else(usage)?;
            let (device, pid) = (device.parse().map_err(|_| usage())?, pid.parse().map_err(|_| usage())?);
            return if pid == 0 { Err(usage()) } else { Ok(Fault::HostProcess { device, pid }) };
        }
        // The window follows the last '@' (a job's USER@KIND:NAME holds one too).
        let (target, when) = rest.rsplit_once('@').ok_or_else(usage)?;
        let (start, length) = match when.split_once('+') {
            Some((start, length)) => (start, Some(duration_ms(length).ok_or_else(usage)?)),
            None => (when, None),
        };
        let window = Window { start_ms: duration_ms(start).ok_or_else(usage)?, length_ms: length };
        if kind == "xid" {
            let (device, code) = target.split_once(':').ok_or_else(usage)?;
            if length.is_some() {
                return Err(usage());
            }
            let (device, code) = (device.parse().map_err(|_| usage())?, code.parse().map_err(|_| usage())?);
            return Ok(Fault::Xid { device, code, at_ms: window.start_ms });
        }
        if kind == "job" {
            return parse_job(target, window).ok_or_else(usage);
        }
        let device = target.parse().map_err(|_| usage())?;
        Ok(match kind {
            "lost" => Fault::Lost { device, window },
            "hot" => Fault::Hot { device, window },
            "warm" => Fault::Warm { device, window },
            "power-brake" => Fault::PowerBrake { device, window },
            "power-cap" => Fault::PowerCap { device, window },
            "ecc" => Fault::Ecc { device, window },
            "memory-full" => Fault::MemoryFull { device, window },
            "job-ends" => Fault::JobEnds { device, window },
            "idle-holder" => Fault::IdleHolder { device, window },
            "unseen" => Fault::Unseen { device, window },
            _ => return Err(usage()),
        })
    }
}

/// `INDEX:USER[@KIND:NAME]:GIB[:SM]` of a job fault, which must have a length.
fn parse_job(target: &str, window: Window) -> Option<Fault> {
    let mut parts = target.split(':');
    let device = parts.next()?.parse().ok()?;
    let (user, workload) = match parts.next()?.split_once('@') {
        None => (target.split(':').nth(1)?.to_owned(), None),
        Some((user, kind)) => (user.to_owned(), Some(Box::new(scripted_workload(user, kind, parts.next()?)?))),
    };
    let gib = parts.next()?.parse().ok()?;
    let sm_util =
        parts.next().map(|sm| sm.parse().ok().filter(|&sm| sm <= 100)).map_or(Some(None), |sm| sm.map(Some))?;
    let spin = match parts.next() {
        Some("spin") if sm_util.is_some() => true,
        Some(_) => return None,
        None => false,
    };
    let valid_user = (1..=32).contains(&user.len())
        && user.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
    if parts.next().is_some() || window.length_ms.is_none() || !valid_user {
        return None;
    }
    Some(Fault::Job { device, job: ScriptedJob { user, workload, gib, sm_util, spin }, window })
}

/// Where a scripted job runs: `container:NAME` (as root, owner label USER), `pod:NS/NAME` (as
/// root; the namespace owns it) or `slurm:JOBID` (as USER, account "lab", partition "gpu").
fn scripted_workload(user: &str, kind: &str, name: &str) -> Option<shared::workload::Workload> {
    use shared::workload::{Container, DEFAULT_OWNER_LABEL, Pod, SlurmJob, Workload};
    let name_ok = |n: &str| {
        (1..=63).contains(&n.len()) && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    };
    let mut workload = Workload::default();
    match kind {
        "container" if name_ok(name) => {
            workload.container = Some(Container {
                id: format!("{:012x}", fnv(name)),
                runtime: Some("docker".to_owned()),
                name: Some(name.to_owned()),
                image: Some("nvcr.io/nvidia/pytorch:24.05-py3".to_owned()),
                labels: vec![(DEFAULT_OWNER_LABEL.to_owned(), user.to_owned())],
                trusted: true,
            });
        }
        "pod" => {
            let (namespace, pod) = name.split_once('/').filter(|(ns, p)| name_ok(ns) && name_ok(p))?;
            workload.pod = Some(Pod {
                namespace: Some(namespace.to_owned()),
                name: Some(pod.to_owned()),
                container: Some("main".to_owned()),
                uid: None,
                owner: None,
            });
        }
        "slurm" if !name.is_empty() && name.len() <= 12 && name.bytes().all(|b| b.is_ascii_digit()) => {
            workload.job = Some(SlurmJob {
                id: name.to_owned(),
                user: Some(user.to_owned()),
                account: Some("lab".to_owned()),
                partition: Some("gpu".to_owned()),
                verified: true,
            });
        }
        _ => return None,
    }
    Some(workload)
}

/// A stable made-up container id from a name (FNV-1a, 48 bits).
fn fnv(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
        & ((1 << 48) - 1)
}

impl ScriptedJob {
    /// The Unix user its process runs as: root in a container or pod, the user otherwise.
    pub fn unix_user(&self) -> &str {
        match &self.workload {
            Some(w) if w.job.is_none() => "root",
            _ => &self.user,
        }
    }
}

/// A duration in `humantime`'s words ("30s", "1m", "0s"), in ms.
fn duration_ms(text: &str) -> Option<u64> {
    let duration = humantime::parse_duration(text.trim()).ok()?;
    Some(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

impl Fault {
    /// The GPU the fault strikes.
    pub fn device(&self) -> u32 {
        match *self {
            Fault::Lost { device, .. }
            | Fault::WrongResult { device }
            | Fault::Hot { device, .. }
            | Fault::Warm { device, .. }
            | Fault::PowerBrake { device, .. }
            | Fault::PowerCap { device, .. }
            | Fault::Xid { device, .. }
            | Fault::Ecc { device, .. }
            | Fault::MemoryFull { device, .. }
            | Fault::JobEnds { device, .. }
            | Fault::IdleHolder { device, .. }
            | Fault::Unseen { device, .. }
            | Fault::HostProcess { device, .. }
            | Fault::Job { device, .. } => device,
        }
    }

    /// Why `device` is lost at `now_ms` when sampling began at `first_ms`, if this fault says so.
    pub fn lost_reason(&self, device: u32, first_ms: u64, now_ms: u64) -> Option<String> {
        match *self {
            Fault::Lost { device: d, window } if d == device && window.holds(first_ms, now_ms) => {
                Some(format!("GPU {device} is lost: it fell off the bus (simulated fault)"))
            }
            _ => None,
        }
    }

    /// The GPU whose lab runs this fault makes observe wrong results, if it is such a fault.
    pub fn wrong_result_device(&self) -> Option<u32> {
        match *self {
            Fault::WrongResult { device } => Some(device),
            _ => None,
        }
    }

    /// The host process this fault lists on a GPU, if it is such a fault: the GPU and the PID.
    pub fn host_process(&self) -> Option<(u32, u32)> {
        match *self {
            Fault::HostProcess { device, pid } => Some((device, pid)),
            _ => None,
        }
    }

    /// The XID this fault makes the driver log by `now_ms`, if it is such a fault and its
    /// moment has come: the GPU and the code.
    pub fn xid_due(&self, first_ms: u64, now_ms: u64) -> Option<(u32, u64)> {
        match *self {
            Fault::Xid { device, code, at_ms } => (now_ms >= first_ms.saturating_add(at_ms)).then_some((device, code)),
            _ => None,
        }
    }
}
