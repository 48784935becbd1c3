//! `#gpu-overview`: one row per GPU, like nvitop and the Fleet tab: memory and
//! utilization bars, temperature, power, state, who holds it, and what is wrong
//! (`shared::severity`) in words. A row opens into the GPU's full card.

use std::collections::BTreeSet;

use leptos::prelude::*;
use shared::{
    DeviceSample,
    activity::{GpuState, gpu_state, held_idle_reason},
    processes::GpuProcess,
    severity,
    units::{format_bytes, format_watts, or_na},
};

use crate::{
    components::{
        format,
        gpu_grid::{GpuGrid, LayoutToggle},
        severity_badges::SeverityBadges,
    },
    hooks::{reservations::Reservations, theme::Theme, url::ViewSignals},
    split::{self, Lazily},
    state::DashboardState,
};

/// How many findings a row shows as badges; the rest are counted ("+2") and listed in its tooltip.
const ROW_BADGES: usize = 1;

/// The table of GPUs, or for many the grid (`compact`); `indices` changes only with a snapshot.
#[component]
pub fn Overview(
    state: ReadSignal<DashboardState>,
    indices: Memo<Vec<u32>>,
    theme: ReadSignal<Theme>,
    compact: Memo<bool>,
) -> impl IntoView {
    // Which rows are open (the view's, kept in the URL); each open row draws its card, the others nothing.
    let expanded = expect_context::<ViewSignals>().cards;
    let all_open = move || {
        let open = expanded.with(BTreeSet::len);
        open > 0 && open == indices.with(Vec::len)
    };
    let toggle_all = move |_| {
        if all_open() {
            expanded.set(BTreeSet::new());
        } else {
            expanded.set(indices.get().into_iter().collect());
        }
    };

    view! {
        <section id="gpu-overview" class="section overview" aria-labelledby="overview-title">
            <div class="section-head overview-head">
                <h2 id="overview-title" class="section-title">"GPUs"</h2>
                <LayoutToggle compact=compact />
                <button id="expand-all" type="button" class="overview-expand-all" on:click=toggle_all>
                    {move || if all_open() { "Close all cards" } else { "Open all cards" }}
                </button>
            </div>
            <Show when=move || compact.get()>
                <GpuGrid state=state indices=indices theme=theme />
            </Show>
            <div class="table-scroll" hidden=move || compact.get()>
                <table class="overview-table">
                    <thead>
                        <tr>
                            <th scope="col">"GPU"</th>
                            <th scope="col">"Model"</th>
                            <th scope="col">"Memory"</th>
                            <th scope="col" title="GPU util: share of time any kernel ran. SM: share of time the SMs had work (GPM)">
                                "Util · SM"
                            </th>
                            <th scope="col">"Temp"</th>
                            <th scope="col">"Power"</th>
                            <th scope="col">"State"</th>
                            <th scope="col">"Users"</th>
                            <th scope="col">"Health"</th>
                        </tr>
                    </thead>
                    <Show when=move || !compact.get()>
                        <For each=move || indices.get() key=|index| *index let:index>
                            <GpuRow state=state index=index expanded=expanded theme=theme />
                        </For>
                    </Show>
                </table>
            </div>
        </section>
    }
}

/// `tbody.gpu-row-group`: the row of GPU `index` and, while it is open, its card.
#[component]
fn GpuRow(
    state: ReadSignal<DashboardState>,
    index: u32,
    expanded: RwSignal<BTreeSet<u32>>,
    theme: ReadSignal<Theme>,
) -> impl IntoView {
    // Memos keep the row's text nodes still when another GPU's sample changes.
    let name = Memo::new(move |_| state.with(|s| s.device(index).map(|d| d.info.name.clone()).unwrap_or_default()));
    let total = Memo::new(move |_| state.with(|s| s.device(index).map_or(0, |d| d.info.memory_total)));
    let latest = Memo::new(move |_| state.with(|s| s.device(index).and_then(|d| d.latest.clone())));
    let findings = Memo::new(move |_| {
        state.with(|s| {
            s.device(index).map(|d| severity::assess(&d.info, d.latest.as_ref(), s.health(index))).unwrap_or_default()
        })
    });
    let slowdown = Memo::new(move |_| state.with(|s| s.device(index).and_then(|d| d.info.slowdown_temp_c)));
    let owners = Memo::new(move |_| state.with(|s| owner_chips(&s.processes_on(index).collect::<Vec<_>>())));
    let reservations = use_context::<Reservations>();
    let reserved_by = Memo::new(move |_| {
        reservations.and_then(|r| r.holder_of(index)).map(|r| if r.redacted { String::new() } else { r.user })
    });
    let gpu_state = Memo::new(move |_| {
        state.with(|s| gpu_state(index, s.device(index).and_then(|d| d.latest.as_ref()), &s.processes))
    });
    // Free only by the one rule (`shared::usability`): a GPU with a critical fault is unhealthy.
    let unhealthy = Memo::new(move |_| state.with(|s| s.unhealthy(index)));
    // "held idle: util 92% but SM activity 0.1% for 3m: …" where the util bar beside it reads high.
    let held_why = Memo::new(move |_| {
        state.with(|s| held_idle_reason(index, s.device(index).and_then(|d| d.latest.as_ref()), &s.processes))
    });
    let state_text = move || {
        let words = state_words(gpu_state.get(), unhealthy.get().as_deref(), reserved_by.get().as_deref());
        held_why.with(|why| match why {
            Some(why) => format!("{words}: {why}"),
            None => words,
        })
    };
    let state_class = move || state_class(gpu_state.get(), unhealthy.with(Option::is_some));
    let is_open = Memo::new(move |_| expanded.with(|open| open.contains(&index)));
    let toggle = move |_| {
        expanded.update(|open| {
            if !open.remove(&index) {
                open.insert(index);
            }
        });
    };
    let memory_percent =
        move || latest.with(|s| s.as_ref().and_then(|s| s.memory_fraction(total.get())).map(|f| f * 100.0));
    let memory_text = move || {
        let used = latest.with(|s| s.as_ref().and_then(|s| s.memory_used));
        format!("{} / {}", or_na(used, format_bytes), format_bytes(total.get()))
    };
    let util = move || latest.with(|s| s.as_ref().and_then(|s| s.gpu_util)).map(f64::from);
    let memory_level =
        move || latest.with(|s| severity::memory_level(s.as_ref().and_then(|s| s.memory_used), total.get())).class();
    let temperature_level = move || {
        latest.with(|s| severity::temperature_level(s.as_ref().and_then(|s| s.temperature_c), slowdown.get())).class()
    };
    let row_class = move || {
        let level = findings.with(|f| severity::worst(f));
        format!("gpu-row {} state-{}", level.class(), state_class())
    };
    let detail_id = format!("gpu-detail-{index}");

    view! {
        <tbody class="gpu-row-group" data-index=index>
            <tr class=row_class data-index=index>
                <th scope="row" class="ov-gpu">
                    <button
                        type="button"
                        class="gpu-row-toggle"
                        aria-expanded=move || is_open.get().to_string()
                        aria-controls=detail_id
                        title="Show or hide this GPU's card"
                        on:click=toggle
                    >
                        <span class="ov-caret" aria-hidden="true">{move || if is_open.get() { "▾" } else { "▸" }}</span>
                        {format!("GPU {index}")}
                    </button>
                </th>
                <td class="ov-model" title=move || name.get()>{move || name.get()}</td>
                <td class=move || format!("ov-mem {}", memory_level())>
                    <Bar
                        label=format!("GPU {index} memory used")
                        percent=Signal::derive(memory_percent)
                        text=Signal::derive(memory_text)
                    />
                </td>
                <td class="ov-util">
                    <Bar
                        label=format!("GPU {index} utilization")
                        percent=Signal::derive(util)
                        text=Signal::derive(move || or_na(util(), |u| format!("{u:.0}%")))
                    />
                    <span class="ov-sm" title="SM activity (GPM): share of time the SMs had work">
                        {move || latest.with(|s| sm_text(s.as_ref()))}
                    </span>
                </td>
                <td class=move || format!("ov-temp {}", temperature_level())>
                    {move || latest.with(|s| or_na(s.as_ref().and_then(|s| s.temperature_c), |c| format!("{c} °C")))}
                </td>
                <td class="ov-power">{move || latest.with(|s| power_text(s.as_ref()))}</td>
                <td class=move || format!("ov-state state-{}", state_class()) title=state_text>
                    {state_text}
                </td>
                <td class="ov-users">
                    {move || {
                        owners
                            .get()
                            .into_iter()
                            .map(|chip| {
                                // On a GPU someone else has booked now, another owner's chip says so.
                                let holder = reserved_by.get();
                                let intruder = holder.as_deref().is_some_and(|h| is_intruder_chip(&chip, h));
                                let (text, title) = if intruder {
                                    let holder = holder.as_deref().filter(|h| !h.is_empty()).unwrap_or("someone");
                                    (format!("⚠ {}", chip.text), format!("{} — runs here while {holder} has it reserved", chip.title))
                                } else {
                                    (chip.text, chip.title)
                                };
                                view! {
                                    <span class="owner-chip" class:owner-idle=chip.idle class:owner-intruder=intruder
                                        title=title data-user=chip.user>
                                        {text}
                                    </span>
                                }
                            })
                            .collect_view()
                    }}
                </td>
                <td class="ov-health">
                    <SeverityBadges findings=findings limit=ROW_BADGES />
                </td>
            </tr>
            <Show when=move || is_open.get()>
                <tr class="gpu-row-detail" id=format!("gpu-detail-{index}")>
                    <td colspan="9">
                        <Lazily page=split::device_card(state, index, theme) />
                    </td>
                </tr>
            </Show>
        </tbody>
    }
}

/// A bar with its value as text beside it, and as a meter for screen readers.
#[component]
fn Bar(label: String, percent: Signal<Option<f64>>, text: Signal<String>) -> impl IntoView {
    let clamped = move || percent.get().unwrap_or(0.0).clamp(0.0, 100.0);
    view! {
        <div class="ov-bar-cell">
            <div
                class="ov-bar"
                role="meter"
                aria-label=label
                aria-valuemin="0"
                aria-valuemax="100"
                aria-valuenow=move || format!("{:.0}", clamped())
                aria-valuetext=move || text.get()
            >
                <div class="ov-bar-fill" style:transform=move || format!("scaleX({:.3})", clamped() / 100.0)></div>
            </div>
            <span class="ov-bar-text">{move || text.get()}</span>
        </div>
    }
}

/// What a row's State cell says: "lost"; "unhealthy: XID 79" (with "busy, " before it while a
/// process holds it); "free", "busy", "held idle", each with ", reserved by ana" where a
/// reservation holds it now (`reserved_by`: empty for a viewer who is not told who).
pub(crate) fn state_words(state: GpuState, unhealthy: Option<&str>, reserved_by: Option<&str>) -> String {
    let words = match (state, unhealthy) {
        (GpuState::Lost, _) => return "lost".to_owned(),
        (GpuState::Free, Some(reason)) => format!("unhealthy: {reason}"),
        (state, Some(reason)) => format!("{}, unhealthy: {reason}", state.as_str()),
        (state, None) => state.as_str().to_owned(),
    };
    match reserved_by {
        None => words,
        Some(who) if state == GpuState::Free && unhealthy.is_none() => reserved_text("reserved", who),
        Some(who) => reserved_text(&format!("{words}, reserved"), who),
    }
}

/// The State cell's class: "unhealthy" for a GPU with a critical fault that still answers.
pub(crate) fn state_class(state: GpuState, unhealthy: bool) -> &'static str {
    if unhealthy && state != GpuState::Lost { "unhealthy" } else { state.class() }
}

/// "reserved by ana", or "reserved" for a viewer who is not told who.
fn reserved_text(what: &str, who: &str) -> String {
    if who.is_empty() { what.to_owned() } else { format!("{what} by {who}") }
}

/// "312 W / 700 W"; "n/a" when neither is known.
fn power_text(sample: Option<&DeviceSample>) -> String {
    match sample.map(|s| (s.power_draw_mw, s.power_limit_mw)) {
        None | Some((None, None)) => format::na(),
        Some((draw, limit)) => format!("{} / {}", or_na(draw, format_watts), or_na(limit, format_watts)),
    }
}

/// "SM 81%", or "SM n/a" before the first GPM window or where GPM cannot be read.
fn sm_text(sample: Option<&DeviceSample>) -> String {
    let sm = sample.and_then(|s| s.activity.as_ref()).filter(|a| a.unavailable.is_none()).and_then(|a| a.sm_active);
    format!("SM {}", or_na(sm, |v| if v < 10.0 { format!("{v:.1}%") } else { format!("{v:.0}%") }))
}

/// One user's share of a GPU, as a chip: "ana 40.0 GiB".
#[derive(Debug, Clone, PartialEq)]
struct OwnerChip {
    text: String,
    /// The user, for links that filter by them; empty for what the server left out.
    user: String,
    title: String,
    /// Everything they hold here is held idle.
    idle: bool,
}

/// Whether `chip`'s owner intrudes on a GPU that `holder` has reserved now (`""` when the viewer is
/// not told who: then any named owner's chip does, as the server's intruder list would have it).
fn is_intruder_chip(chip: &OwnerChip, holder: &str) -> bool {
    !chip.user.is_empty() && chip.user != holder
}

/// One chip per owner on the GPU, biggest first, naming the workload (container, pod or job) when
/// the owner runs one there; processes the server left out are summed in one chip that says so (an
/// anonymous viewer of a server with tokens is not told who).
fn owner_chips(processes: &[&GpuProcess]) -> Vec<OwnerChip> {
    let mut users: Vec<(String, u64, usize, bool, Vec<String>)> = Vec::new();
    let mut hidden: Option<(u64, usize)> = None;
    for p in processes {
        let memory = p.used_memory.unwrap_or(0);
        if p.redacted {
            let (m, n) = hidden.get_or_insert((0, 0));
            (*m, *n) = (*m + memory, *n + 1);
            continue;
        }
        let user = p.user_name().to_owned();
        let workload = p.workload.as_ref().and_then(shared::workload::short_name);
        match users.iter_mut().find(|u| u.0 == user) {
            Some(entry) => {
                (entry.1, entry.2, entry.3) = (entry.1 + memory, entry.2 + 1, entry.3 && p.idle.is_some());
                entry.4.extend(workload.filter(|w| !entry.4.contains(w)));
            }
            None => users.push((user, memory, 1, p.idle.is_some(), workload.into_iter().collect())),
        }
    }
    shared::order::sort_by(&mut users, |a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let processes = |n: usize| if n == 1 { "1 process".to_owned() } else { format!("{n} processes") };
    let mut chips: Vec<OwnerChip> = users
        .into_iter()
        .map(|(user, memory, n, idle, workloads)| OwnerChip {
            text: match workloads.as_slice() {
                [] => format!("{user} {}", format_bytes(memory)),
                [one] => format!("{user} {} · {one}", format_bytes(memory)),
                [first, rest @ ..] => format!("{user} {} · {first} +{}", format_bytes(memory), rest.len()),
            },
            title: format!(
                "{user}: {} holding {}{}{}",
                processes(n),
                format_bytes(memory),
                if idle { ", idle" } else { "" },
                if workloads.is_empty() { String::new() } else { format!(", in {}", workloads.join(", ")) }
            ),
            user,
            idle,
        })
        .collect();
    if let Some((memory, n)) = hidden {
        chips.push(OwnerChip {
            text: format!("{} {}", processes(n), format_bytes(memory)),
            user: String::new(),
            title: "Who runs what is shown to signed-in viewers".to_owned(),
            idle: false,
        });
    }
    chips
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::activity::{Activity, IdleHold, IdleSignal};

    fn process(user: &str, gib: u64, idle: bool) -> GpuProcess {
        GpuProcess {
            used_memory: Some(gib << 30),
            user: Some(user.to_owned()),
            idle: idle.then_some(IdleHold { since_ms: 0, signal: IdleSignal::SmActivity }),
            ..shared::testing::process(0, 1)
        }
    }

    #[test]
    fn owners_are_summed_per_user_biggest_first_and_hidden_ones_are_not_named() {
        let (ana, bo, ana_idle) = (process("ana", 2, false), process("bo", 10, true), process("ana", 4, true));
        let mut hidden = process("eli", 3, false);
        hidden.redact();
        let chips = owner_chips(&[&ana, &bo, &ana_idle, &hidden]);
        let texts: Vec<(&str, &str, bool)> = chips.iter().map(|c| (c.text.as_str(), c.user.as_str(), c.idle)).collect();
        assert_eq!(
            texts,
            [("bo 10.0 GiB", "bo", true), ("ana 6.00 GiB", "ana", false), ("1 process 3.00 GiB", "", false)]
        );
        assert!(!chips.iter().any(|c| c.text.contains("eli") || c.title.contains("eli")));
        assert_eq!(chips[1].title, "ana: 2 processes holding 6.00 GiB");
        assert!(owner_chips(&[]).is_empty());
    }

    #[test]
    fn a_chip_names_its_owners_workload() {
        use shared::workload::{Container, DEFAULT_OWNER_LABEL, Workload};
        let mut in_container = process("root", 4, false);
        in_container.workload = Some(Workload {
            container: Some(Container {
                id: "c0ffee123456".into(),
                name: Some("trainer".into()),
                labels: vec![(DEFAULT_OWNER_LABEL.into(), "ana".into())],
                trusted: true,
                ..Container::default()
            }),
            ..Workload::default()
        });
        in_container.apply_owner_rule(DEFAULT_OWNER_LABEL);
        let chips = owner_chips(&[&in_container]);
        assert_eq!((chips[0].text.as_str(), chips[0].user.as_str()), ("ana 4.00 GiB · trainer", "ana"));
        assert_eq!(chips[0].title, "ana: 1 process holding 4.00 GiB, in trainer");
    }

    #[test]
    fn row_figures_read_short() {
        let sample = DeviceSample {
            power_draw_mw: Some(312_000),
            power_limit_mw: Some(700_000),
            activity: Some(Activity { sm_active: Some(4.31), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(power_text(Some(&sample)), "312 W / 700 W");
        assert_eq!(power_text(None), "n/a");
        assert_eq!(sm_text(Some(&sample)), "SM 4.3%");
        assert_eq!(sm_text(None), "SM n/a");
        let unavailable = DeviceSample { activity: Some(Activity::unavailable(0, "pre-Hopper")), ..Default::default() };
        assert_eq!(sm_text(Some(&unavailable)), "SM n/a");
        assert_eq!(GpuState::Lost.as_str(), "lost");
        assert_eq!(GpuState::HeldIdle.class(), "held-idle");
        assert_eq!(reserved_text("reserved", "ana"), "reserved by ana");
        assert_eq!(reserved_text("busy, reserved", ""), "busy, reserved");
    }

    #[test]
    fn the_state_says_unhealthy_with_its_reason_never_free() {
        assert_eq!(state_words(GpuState::Free, None, None), "free");
        assert_eq!(state_words(GpuState::Free, Some("XID 79"), None), "unhealthy: XID 79");
        assert_eq!(
            state_words(GpuState::Busy, Some("ECC: 2 uncorrected"), None),
            "busy, unhealthy: ECC: 2 uncorrected"
        );
        assert_eq!(state_words(GpuState::Lost, Some("lost"), Some("ana")), "lost");
        assert_eq!(state_words(GpuState::Free, None, Some("ana")), "reserved by ana");
        assert_eq!(state_words(GpuState::HeldIdle, None, Some("")), "held idle, reserved");
        assert_eq!(state_words(GpuState::Free, Some("XID 79"), Some("ana")), "unhealthy: XID 79, reserved by ana");
    }
}
