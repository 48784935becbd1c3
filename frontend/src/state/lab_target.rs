//! The Lab's GPU picker on a shared box: each GPU labelled with its state and
//! owners ("GPU 2 — busy: ana 20.0 GiB"), a free GPU chosen by default, and the
//! words of the confirm step for a run that takes several GPUs.
//!
//! "Free" is [`shared::reservations::free_unreserved`], the rule the dashboard's
//! "Free: GPU …" and `/api/processes` use.

use shared::{
    activity::{GpuState, gpu_state},
    processes::usage_by_user,
    reservations::{Reservation, holder},
    units::format_bytes,
};

use super::DashboardState;

/// One option of `#lab-device`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuChoice {
    pub index: u32,
    /// "GPU 2 — busy: ana 20.0 GiB (NVIDIA H200)".
    pub label: String,
    /// What the GPU is: "free", "busy", "held idle", "reserved", "unhealthy" or "lost" (the option's `data-state`).
    pub state: &'static str,
}

/// Every GPU with its state and who holds it, in the server's order.
pub fn gpu_choices(state: &DashboardState, reservations: &[Reservation], now_ms: u64) -> Vec<GpuChoice> {
    let free = state.free_devices(reservations, now_ms);
    state
        .devices
        .iter()
        .map(|device| {
            let index = device.info.index;
            let (word, detail) = status(state, reservations, now_ms, index, free.contains(&index));
            GpuChoice { index, label: format!("GPU {index} — {word}{detail} ({})", device.info.name), state: word }
        })
        .collect()
}

/// The state word of GPU `index` and who holds it (": ana 20.0 GiB, bo 1.00 GiB"; " by bo" when reserved).
fn status(
    state: &DashboardState,
    reservations: &[Reservation],
    now_ms: u64,
    index: u32,
    free: bool,
) -> (&'static str, String) {
    let latest = state.device(index).and_then(|d| d.latest.as_ref());
    let use_state = gpu_state(index, latest, &state.processes);
    if use_state == GpuState::Lost {
        return ("lost", String::new());
    }
    if let Some(reason) = state.unhealthy(index) {
        return ("unhealthy", format!(": {reason}"));
    }
    if free {
        return ("free", String::new());
    }
    let on_it: Vec<_> = state.processes_on(index).cloned().collect();
    let owners = usage_by_user(&on_it)
        .iter()
        .map(|u| format!("{} {}", u.user, format_bytes(u.memory)))
        .collect::<Vec<_>>()
        .join(", ");
    let owners = if owners.is_empty() && !on_it.is_empty() { "someone (sign in to see)".to_owned() } else { owners };
    let owners = if owners.is_empty() { owners } else { format!(": {owners}") };
    match (use_state, holder(reservations, index, now_ms)) {
        // Anonymous viewers see "reserved" for the holder's name: no "by" then.
        (GpuState::Free, Some(r)) if r.redacted => ("reserved", String::new()),
        (GpuState::Free, Some(r)) => ("reserved", format!(" by {}", r.user)),
        (GpuState::HeldIdle, _) => ("held idle", owners),
        // Someone gpudash cannot see holds it: never offered as free.
        (GpuState::InUseUnseen, _) => ("in use", ": no process visible".to_owned()),
        (_, _) => ("busy", owners),
    }
}

/// The GPU the picker starts on: the first free one, else the first that answers and is healthy, else GPU 0.
pub fn default_gpu(choices: &[GpuChoice]) -> u32 {
    choices
        .iter()
        .find(|c| c.state == "free")
        .or_else(|| choices.iter().find(|c| !matches!(c.state, "lost" | "unhealthy")))
        .map_or(0, |c| c.index)
}

/// The GPU the picker is on: the default ([`default_gpu`]) until the reader picks one or runs an
/// experiment on it, then theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PickedGpu {
    index: u32,
    /// Whether the reader chose it: then no later list moves it.
    by_reader: bool,
}

impl PickedGpu {
    /// The reader's own choice, kept whatever the GPUs' states do later.
    pub fn by_reader(index: u32) -> Self {
        Self { index, by_reader: true }
    }

    /// The GPU to run on.
    pub fn index(self) -> u32 {
        self.index
    }

    /// After the list changed (the GPUs, their processes or the reservations were read): the default
    /// follows it, since a first list read before the processes calls every GPU free; a choice stays.
    pub fn follow(self, choices: &[GpuChoice]) -> Self {
        if self.by_reader || choices.is_empty() { self } else { Self { index: default_gpu(choices), by_reader: false } }
    }
}

/// What a run on several GPUs asks before it is queued: each GPU it takes, with its state and owners.
pub fn several_gpus_question(choices: &[GpuChoice], devices: &[u32]) -> String {
    let lines: Vec<String> = devices
        .iter()
        .map(|d| choices.iter().find(|c| c.index == *d).map_or_else(|| format!("GPU {d}"), |c| c.label.clone()))
        .collect();
    format!(
        "This run takes {} GPUs at once, each for the whole run: {}. Others' runs on them wait. Run it?",
        devices.len(),
        lines.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use shared::{DeviceInfo, DeviceSample, MemoryRing, processes::GpuProcess};

    use super::super::DeviceState;
    use super::*;

    fn device(index: u32, lost: bool) -> DeviceState {
        let info = DeviceInfo { memory_total: 0, simulated: true, ..shared::testing::device(index) };
        let latest =
            DeviceSample { index, timestamp_ms: 1, lost: lost.then(|| "fell off".into()), ..Default::default() };
        DeviceState { info, latest: Some(latest), memory: MemoryRing::new(1000), memory_revision: 0 }
    }

    fn process(device: u32, user: &str, gib: u64) -> GpuProcess {
        GpuProcess {
            used_memory: Some(gib << 30),
            user: Some(user.to_owned()),
            ..shared::testing::process(device, 100 + device)
        }
    }

    fn state(count: u32, processes: Vec<GpuProcess>, lost: Option<u32>) -> DashboardState {
        let devices = (0..count).map(|i| device(i, lost == Some(i))).collect();
        DashboardState { devices, processes, ..DashboardState::default() }
    }

    fn reservation(device: u32, user: &str) -> Reservation {
        Reservation {
            id: 1,
            devices: vec![device],
            user: user.to_owned(),
            start_ms: 0,
            end_ms: 100,
            note: String::new(),
            created_ms: 0,
            released_ms: None,
            intruders: vec![],
            redacted: false,
        }
    }

    #[test]
    fn options_say_state_and_owner_and_the_picker_starts_on_a_free_gpu() {
        let s = state(5, vec![process(0, "ana", 20), process(1, "bo", 3)], Some(2));
        let choices = gpu_choices(&s, &[reservation(3, "bo")], 50);
        let labels: Vec<&str> = choices.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "GPU 0 — busy: ana 20.0 GiB (NVIDIA H200)",
                "GPU 1 — busy: bo 3.00 GiB (NVIDIA H200)",
                "GPU 2 — lost (NVIDIA H200)",
                "GPU 3 — reserved by bo (NVIDIA H200)",
                "GPU 4 — free (NVIDIA H200)",
            ]
        );
        assert_eq!(default_gpu(&choices), 4);
        // None free: the first that answers.
        let busy = state(2, vec![process(0, "ana", 20), process(1, "bo", 3)], None);
        assert_eq!(default_gpu(&gpu_choices(&busy, &[], 0)), 0);
        assert_eq!(default_gpu(&[]), 0);
    }

    #[test]
    fn the_default_follows_the_list_until_the_reader_picks() {
        // The GPU list arrives before the processes: every GPU reads free, the default is GPU 0.
        let first = PickedGpu::default().follow(&gpu_choices(&state(3, vec![], None), &[], 0));
        assert_eq!(first.index(), 0);
        // The processes arrive: GPU 0 is busy, so the default moves to the first free one.
        let busy = state(3, vec![process(0, "ana", 20)], None);
        let second = first.follow(&gpu_choices(&busy, &[], 0));
        assert_eq!(second.index(), 1, "not left on a busy GPU");
        // A reservation read later moves it again.
        assert_eq!(second.follow(&gpu_choices(&busy, &[reservation(1, "bo")], 50)).index(), 2);
        // An empty list (no snapshot yet) leaves it be.
        assert_eq!(second.follow(&[]), second);
        // The reader's choice stays, even on a GPU that turns busy.
        let mine = PickedGpu::by_reader(0);
        assert_eq!(mine.follow(&gpu_choices(&busy, &[], 0)).index(), 0);
        assert_eq!(mine.follow(&gpu_choices(&state(3, vec![], None), &[], 0)), mine);
    }

    #[test]
    fn several_gpus_are_named_with_their_owners_before_they_are_taken() {
        let s = state(3, vec![process(1, "bo", 3)], None);
        let question = several_gpus_question(&gpu_choices(&s, &[], 0), &[0, 1, 2]);
        assert!(question.starts_with("This run takes 3 GPUs at once"), "{question}");
        assert!(question.contains("GPU 1 — busy: bo 3.00 GiB"), "{question}");
        assert!(question.contains("GPU 0 — free"), "{question}");
    }
}
