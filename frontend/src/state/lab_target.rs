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
    /// What the GPU is: "free", "busy", "held idle", "in use", "reserved", "unhealthy" or "lost" (the option's
    /// `data-state`).
    pub state: &'static str,
    /// Who a run on it would disturb: the users of its processes, or the booking's holder ("someone …" where
    /// the viewer may not see names or gpudash cannot see the processes). Empty when free.
    pub holders: Vec<String>,
}

/// Every GPU with its state and who holds it, in the server's order.
pub fn gpu_choices(state: &DashboardState, reservations: &[Reservation], now_ms: u64) -> Vec<GpuChoice> {
    let free = state.free_devices(reservations, now_ms);
    state
        .devices
        .iter()
        .map(|device| {
            let index = device.info.index;
            let (word, detail, holders) = status(state, reservations, now_ms, index, free.contains(&index));
            let label = format!("GPU {index} — {word}{detail} ({})", device.info.name);
            GpuChoice { index, label, state: word, holders }
        })
        .collect()
}

/// Who holds a GPU whose processes the viewer may not see named.
const SOMEONE_HIDDEN: &str = "someone (sign in to see)";

/// The state word of GPU `index`, who holds it in words (": ana 20.0 GiB, bo 1.00 GiB"; " by bo" when
/// reserved), and the holders by name.
fn status(
    state: &DashboardState,
    reservations: &[Reservation],
    now_ms: u64,
    index: u32,
    free: bool,
) -> (&'static str, String, Vec<String>) {
    let latest = state.device(index).and_then(|d| d.latest.as_ref());
    let use_state = gpu_state(index, latest, &state.processes);
    if use_state == GpuState::Lost {
        return ("lost", String::new(), Vec::new());
    }
    let on_it: Vec<_> = state.processes_on(index).cloned().collect();
    let usage = usage_by_user(&on_it);
    let mut holders: Vec<String> = usage.iter().map(|u| u.user.clone()).collect();
    if holders.is_empty() && !on_it.is_empty() {
        holders.push(SOMEONE_HIDDEN.to_owned());
    }
    if let Some(reason) = state.unhealthy(index) {
        return ("unhealthy", format!(": {reason}"), holders);
    }
    if free {
        return ("free", String::new(), Vec::new());
    }
    let owners = usage.iter().map(|u| format!("{} {}", u.user, format_bytes(u.memory))).collect::<Vec<_>>().join(", ");
    let owners = if owners.is_empty() && !on_it.is_empty() { SOMEONE_HIDDEN.to_owned() } else { owners };
    let owners = if owners.is_empty() { owners } else { format!(": {owners}") };
    match (use_state, holder(reservations, index, now_ms)) {
        // Anonymous viewers see "reserved" for the holder's name: no "by" then.
        (GpuState::Free, Some(r)) if r.redacted => ("reserved", String::new(), vec![SOMEONE_HIDDEN.to_owned()]),
        (GpuState::Free, Some(r)) => ("reserved", format!(" by {}", r.user), vec![r.user.clone()]),
        (GpuState::HeldIdle, _) => ("held idle", owners, holders),
        // Someone gpudash cannot see holds it: never offered as free.
        (GpuState::InUseUnseen, _) => {
            ("in use", ": no process visible".to_owned(), vec!["someone gpudash cannot see".to_owned()])
        }
        (_, _) => ("busy", owners, holders),
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

/// What the Lab asks before it queues a run on `devices` (the server's answer to `POST /api/runs/check`):
/// a run on several GPUs names each with its state and holders; a forced run names the people whose work
/// it will run beside. `None` when there is nothing to ask: one GPU, and not forced onto someone's.
pub fn run_question(choices: &[GpuChoice], devices: &[u32], force: bool) -> Option<String> {
    let picked: Vec<Option<&GpuChoice>> = devices.iter().map(|d| choices.iter().find(|c| c.index == *d)).collect();
    let mut people: Vec<&str> = picked.iter().flatten().flat_map(|c| c.holders.iter().map(String::as_str)).collect();
    shared::order::sort(&mut people);
    people.dedup();
    let forced_over = force && !people.is_empty();
    if devices.len() < 2 && !forced_over {
        return None;
    }
    let lines: Vec<String> =
        devices.iter().zip(&picked).map(|(d, c)| c.map_or_else(|| format!("GPU {d}"), |c| c.label.clone())).collect();
    let mut question = if devices.len() > 1 {
        format!(
            "This run takes {} GPUs at once, each for the whole run: {}. Others' runs on them wait.",
            devices.len(),
            lines.join("; ")
        )
    } else {
        format!("This run takes {}.", lines.join(""))
    };
    if forced_over {
        question.push_str(&format!(
            " Forced, it runs beside the work of {}: their jobs slow down while it runs, and its figures read low.",
            and_list(&people)
        ));
    }
    question.push_str(" Run it?");
    Some(question)
}

/// "ana", "ana and bo", "ana, bo and cy".
fn and_list(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
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
        let question = run_question(&gpu_choices(&s, &[], 0), &[0, 1, 2], false).unwrap();
        assert!(question.starts_with("This run takes 3 GPUs at once"), "{question}");
        assert!(question.contains("GPU 1 — busy: bo 3.00 GiB"), "{question}");
        assert!(question.contains("GPU 0 — free"), "{question}");
        assert!(!question.contains("Forced"), "{question}");
        assert!(question.ends_with("Run it?"), "{question}");
    }

    #[test]
    fn a_forced_run_names_everyone_it_disturbs_and_a_plain_one_gpu_run_asks_nothing() {
        let s = state(4, vec![process(1, "bo", 3), process(2, "ana", 20), process(2, "cy", 1)], None);
        let choices = gpu_choices(&s, &[reservation(3, "dee")], 50);
        assert_eq!(choices[2].holders, ["ana", "cy"]);
        assert_eq!(choices[3].holders, ["dee"], "a booking's holder is disturbed too");
        assert!(choices[0].holders.is_empty());
        // One free GPU, forced or not, and one busy GPU not forced (the server refuses that): no question.
        assert_eq!(run_question(&choices, &[0], true), None);
        assert_eq!(run_question(&choices, &[1], false), None);
        let one = run_question(&choices, &[2], true).unwrap();
        assert!(one.starts_with("This run takes GPU 2 — busy: "), "{one}");
        assert!(one.contains("Forced, it runs beside the work of ana and cy:"), "{one}");
        let all = run_question(&choices, &[0, 1, 2, 3], true).unwrap();
        assert!(all.contains("the work of ana, bo, cy and dee:"), "{all}");
        assert!(all.starts_with("This run takes 4 GPUs at once"), "{all}");
        // Processes whose owners the viewer may not see, and a GPU used by processes gpudash cannot see.
        let mut hidden = process(1, "x", 3);
        hidden.redacted = true;
        let s = state(2, vec![hidden], None);
        let choices = gpu_choices(&s, &[], 0);
        assert_eq!(choices[1].holders, ["someone (sign in to see)"]);
        let q = run_question(&choices, &[1], true).unwrap();
        assert!(q.contains("the work of someone (sign in to see):"), "{q}");
    }
}
