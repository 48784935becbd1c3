//! One GPU's card, opened from its overview row: what is wrong, memory bar, gauges, the
//! memory chart, the health section, and its identity (UUID, PCI, compute capability).

use leptos::prelude::*;
use shared::auth::Role;
use wasm_bindgen::JsCast;

use crate::components::activity::ActivityFigures;
use shared::{
    ComputeCapability, DeviceInfo, DeviceSample,
    units::{format_bytes, format_watts, or_na},
};

use crate::{
    components::{
        format::{self, mhz, na, percent},
        health::{HealthDetails, MigInstances},
        memory_chart::MemoryChart,
        meter::{Meter, memory_words},
        reservation_timeline::{BookingAxis, BookingBar},
        severity_badges::SeverityBadges,
    },
    hooks::{reservations::Reservations, session::Session, theme::Theme, url::ViewSignals},
    state::DashboardState,
};
use shared::processes::GpuProcess;
use shared::reservations::Reservation;

/// The card of GPU `index`; its figures follow that device's latest sample.
#[component]
pub fn DeviceCard(state: ReadSignal<DashboardState>, index: u32, theme: ReadSignal<Theme>) -> impl IntoView {
    // Memos keep the card's text nodes still when another GPU's sample changes.
    let info = Memo::new(move |_| state.with(|s| s.device(index).map(|d| d.info.clone())));
    let latest = Memo::new(move |_| state.with(|s| s.device(index).and_then(|d| d.latest.clone())));
    let info_text = move |f: fn(&DeviceInfo) -> String| move || info.with(|i| i.as_ref().map(f).unwrap_or_default());
    let gauge = move |f: fn(&DeviceSample) -> String| move || latest.with(|s| s.as_ref().map_or_else(na, f));
    let memory_total = move || info.with(|i| i.as_ref().map_or(0, |i| i.memory_total));
    let used_percent = move || {
        let fraction = latest.with(|s| s.as_ref().and_then(|s| s.memory_fraction(memory_total())));
        fraction.map(|f| f * 100.0)
    };
    let memory_words_now =
        move || memory_words(latest.with(|s| s.as_ref().and_then(|s| s.memory_used)), memory_total());
    let util_percent = move || latest.with(|s| s.as_ref().and_then(|s| s.gpu_util).map(f64::from));
    let util_words = move || latest.with(|s| s.as_ref().and_then(|s| s.gpu_util).map_or_else(na, percent));
    let memory_text = move || {
        let used = latest.with(|s| s.as_ref().and_then(|s| s.memory_used));
        format!("{} / {}", or_na(used, format_bytes), format_bytes(memory_total()))
    };
    let power = move || latest.with(|s| power_halves(s.as_ref()));
    let simulated = move || info.with(|i| i.as_ref().is_some_and(|i| i.simulated));
    let findings = Memo::new(move |_| {
        state.with(|s| {
            s.device(index)
                .map(|d| shared::severity::assess(&d.info, d.latest.as_ref(), s.health(index)))
                .unwrap_or_default()
        })
    });
    let card_class = move || format!("gpu-card {}", findings.with(|f| worst_class(f)));
    let lost = Memo::new(move |_| latest.with(|s| s.as_ref().and_then(|s| s.lost.clone())));
    let is_lost = move || lost.with(Option::is_some);
    let reservations = use_context::<Reservations>();
    let held = Memo::new(move |_| reservations.and_then(|r| r.holder_of(index)));
    let now = move || reservations.map_or(0, |r| r.list.with(|l| l.now_ms));
    // Not held now, but booked within three hours: "Booked: reserved from 14:00 by ana".
    let soon = Memo::new(move |_| {
        let list = reservations?.list;
        list.with(|l| {
            let note = shared::reservations::free_note(&l.reservations, index, l.now_ms, format::utc_offset())?;
            let r = shared::reservations::booked_soon(&l.reservations, index, l.now_ms)?;
            let who = if r.redacted { String::new() } else { format!(" by {}", r.user) };
            Some(format!("Booked: {note}{who}"))
        })
    });
    let pcie = move || {
        let max = info.with(|i| i.as_ref().and_then(|i| i.pcie_max));
        latest.with(|s| match s {
            Some(s) if s.lost.is_none() => format::pcie_now_and_max(s.pcie_link, max),
            _ => na(),
        })
    };

    view! {
        <article class=card_class class:gpu-lost=is_lost data-index=index>
            <header class="gpu-card-head">
                <div class="gpu-title">
                    // The number inside the heading, so a heading list reads "GPU 3 NVIDIA H100 …".
                    <h3 class="gpu-heading">
                        <span class="gpu-index">{format!("GPU {index}")}</span>
                        " "
                        <span class="gpu-name" title=info_text(|i| i.name.clone())>{info_text(|i| i.name.clone())}</span>
                    </h3>
                    <Show when=is_lost>
                        <span class="badge badge-lost" title="The GPU stopped answering">
                            "LOST"
                        </span>
                    </Show>
                    <Show when=simulated>
                        <span class="badge badge-simulated" title="Figures come from gpudash's simulator">
                            "simulated"
                        </span>
                    </Show>
                </div>
                <div class="gpu-severity" aria-label="What needs a look">
                    <SeverityBadges findings=findings />
                </div>
                // A GPU that stopped answering can be neither booked nor measured: no actions, the reason below.
                <Show when=move || !is_lost()>
                    <CardActions index=index />
                </Show>
            </header>

            {move || {
                held.get().map(|r| {
                    // The intruders by name, not by PID alone.
                    let names = state.with(|s| intruder_names(&r, s.processes_on(index)));
                    reserved_line(&r, now(), &names)
                })
            }}
            {move || soon.get().map(|text| view! { <p class="reserved-soon">{text}</p> })}
            <Show when=is_lost>
                <p class="lost-reason" role="alert">{move || lost.get().unwrap_or_default()}</p>
            </Show>

            <section class="mem" aria-label="Memory">
                <div class="mem-row">
                    <span class="metric-label">"Memory"</span>
                    <span class="mem-text">{memory_text}</span>
                </div>
                <Meter class="mem-bar" label="Memory used" percent=used_percent text=memory_words_now />
            </section>

            <dl class="metrics">
                <div class="metric">
                    <dt class="metric-label">"GPU util"</dt>
                    <dd class="metric-value gpu-util">
                        {gauge(|s| or_na(s.gpu_util, percent))}
                        <Meter class="util-bar" label="GPU utilization" percent=util_percent text=util_words />
                    </dd>
                </div>
                <Metric label="Mem util" class="mem-util" value=gauge(|s| or_na(s.mem_util, percent)) />
                <Metric label="Temp" class="temperature" value=gauge(|s| or_na(s.temperature_c, |c| format!("{c} °C"))) />
                <div class="metric">
                    <dt class="metric-label">"Power"</dt>
                    // Draw stands out, the limit reads as context; the text stays "312 W / 700 W".
                    <dd class="metric-value power">
                        {move || power().0}
                        <span class="metric-sub">{move || power().1}</span>
                    </dd>
                </div>
                <Metric label="SM clock" class="sm-clock" value=gauge(|s| or_na(s.sm_clock_mhz, mhz)) />
                <Metric label="Mem clock" class="mem-clock" value=gauge(|s| or_na(s.mem_clock_mhz, mhz)) />
            </dl>

            <ActivityFigures state=state index=index />

            <MigInstances state=state index=index />
            <MemoryChart state=state index=index theme=theme />
            // Bookings below the chart, so the chart stays in the first screen at 1280×900 (budgets.rs).
            <div class="gpu-bookings" title="Bookings of this GPU in the next 24 hours">
                <BookingBar device=index />
                <BookingAxis />
            </div>
            // Who holds it, beside who booked it: below the chart, which stays in the first screen.
            <Holders state=state index=index />
            // The secondary gauges after the chart, so the chart stays in the first screen at 1280×900.
            <dl class="metrics metrics-more">
                <Metric label="P-state" class="pstate" value=gauge(|s| or_na(s.pstate, |p| format!("P{p}"))) />
                <Metric label="Gfx clock" class="graphics-clock" value=gauge(|s| or_na(s.graphics_clock_mhz, mhz)) />
                <Metric
                    label="Power cap"
                    class="power-cap"
                    value=gauge(|s| or_na(s.enforced_power_limit_mw, format_watts))
                />
                <Metric label="Fans" class="fans" value=gauge(|s| format::fans(s.fan_speeds.as_deref())) />
                <Metric label="PCIe now / max" class="pcie-link" value=pcie wide=true />
                <Metric label="Enc / Dec" class="enc-dec" value=gauge(encoder_decoder) />
                <Metric
                    label="Clock events"
                    class="clock-events"
                    value=gauge(|s| format::clock_events(s.clock_events.as_deref()))
                    wide=true
                />
            </dl>
            <HealthDetails state=state index=index />
            // Identity is looked up, not watched: folded, out of the header.
            <details class="gpu-identity">
                <summary>"Identity: UUID, PCI, compute capability"</summary>
                <dl class="gpu-ids">
                    <div>
                        <dt>"UUID"</dt>
                        <dd class="gpu-uuid">{info_text(|i| i.uuid.clone())}</dd>
                    </div>
                    <div>
                        <dt>"PCI"</dt>
                        <dd class="gpu-pci">{info_text(|i| i.pci_bus_id.clone())}</dd>
                    </div>
                    <div>
                        <dt>"Compute"</dt>
                        <dd class="gpu-cc">{info_text(|i| or_na(i.compute_capability, format_capability))}</dd>
                    </div>
                    <div>
                        <dt>"Slowdown / shutdown"</dt>
                        <dd class="gpu-thresholds">{info_text(thresholds)}</dd>
                    </div>
                </dl>
            </details>
        </article>
    }
}

/// One labelled gauge; `class` is what tests and styles find the value by.
#[component]
fn Metric(
    label: &'static str,
    class: &'static str,
    value: impl Fn() -> String + Send + Sync + 'static,
    /// Spans two columns, for values that run long.
    #[prop(optional)]
    wide: bool,
) -> impl IntoView {
    view! {
        <div class="metric" class:metric-wide=wide>
            <dt class="metric-label">{label}</dt>
            <dd class=format!("metric-value {class}")>{value}</dd>
        </div>
    }
}

/// Encoder and decoder utilization: "0% / 12%".
fn encoder_decoder(sample: &DeviceSample) -> String {
    match (sample.encoder_util, sample.decoder_util) {
        (None, None) => na(),
        (enc, dec) => format!("{} / {}", or_na(enc, percent), or_na(dec, percent)),
    }
}

/// The GPU's own temperature thresholds: "87 °C / 95 °C".
fn thresholds(info: &DeviceInfo) -> String {
    let celsius = |c: u32| format!("{c} °C");
    format!("{} / {}", or_na(info.slowdown_temp_c, celsius), or_na(info.shutdown_temp_c, celsius))
}

fn format_capability(cc: ComputeCapability) -> String {
    format!("{}.{}", cc.major, cc.minor)
}

/// Power as draw and " / limit", styled apart on the card, together reading
/// "312 W / 700 W"; "n/a" when neither is known, and in place of either half that is not.
fn power_halves(sample: Option<&DeviceSample>) -> (String, String) {
    match sample.map(|s| (s.power_draw_mw, s.power_limit_mw)) {
        None | Some((None, None)) => (na(), String::new()),
        Some((draw, limit)) => (or_na(draw, format_watts), format!(" / {}", or_na(limit, format_watts))),
    }
}

/// "Reserved by ana for 2 h 10 m — advisory, not enforced", the note, and a warning when someone
/// else runs on the GPU meanwhile.
fn reserved_line(r: &Reservation, now_ms: u64, intruders: &[String]) -> impl IntoView + use<> {
    let left = shared::reservations::time_left(r.end_ms.saturating_sub(now_ms));
    // An anonymous viewer is not told who.
    let who = if r.redacted { String::new() } else { format!(" by {}", r.user) };
    let note = (!r.note.is_empty()).then(|| view! { <span class="reserved-note">{format!(" · {}", r.note)}</span> });
    let intruders = (!intruders.is_empty()).then(|| {
        view! {
            <p class="reservation-intruders" role="alert">
                {format!("⚠ Someone else runs here during the reservation: {}", intruders.join(", "))}
            </p>
        }
    });
    view! {
        <div class="gpu-reservation">
            <p class="reserved-by" title=shared::reservations::ADVISORY>
                {format!("Reserved{who} for {left} — advisory, not enforced")}
                {note}
            </p>
            {intruders}
        </div>
    }
}

/// "bo (PID 4242)" for each intruder the server named on `r` (their PIDs), from the processes on the GPU;
/// a PID no longer listed, or one the viewer is not told about, by its number alone.
fn intruder_names<'a>(r: &Reservation, on_gpu: impl Iterator<Item = &'a GpuProcess>) -> Vec<String> {
    let on_gpu: Vec<&GpuProcess> = on_gpu.collect();
    r.intruders
        .iter()
        .map(|pid| match on_gpu.iter().find(|p| p.pid == *pid && !p.redacted) {
            Some(p) => format!("{} (PID {pid})", p.user_name()),
            None => format!("PID {pid}"),
        })
        .collect()
}

/// `section.gpu-holders`: who holds this GPU, one line per process: its owner (and Unix user where
/// another), memory, workload, how long it has held the GPU idle, and its PID; a process of someone
/// other than the user who has the GPU reserved now is marked. A viewer not told who sees the memory.
#[component]
fn Holders(state: ReadSignal<DashboardState>, index: u32) -> impl IntoView {
    let reservations = use_context::<Reservations>();
    let lines = Memo::new(move |_| {
        // The booking in force by the reservations' clock; idle holds by the GPU's latest reading.
        let held = reservations.and_then(|r| r.holder_of(index).map(|held| (held, r.list.with(|l| l.now_ms))));
        state.with(|s| {
            let now = s.device(index).and_then(|d| d.latest.as_ref()).map_or(0, |l| l.timestamp_ms);
            s.processes_on(index).map(|p| holder_line(p, held.as_ref(), now)).collect::<Vec<_>>()
        })
    });
    view! {
        <section class="gpu-holders" aria-label="Who holds it">
            <h4 class="metric-label">"Who holds it"</h4>
            {move || {
                lines.with(|lines| {
                    if lines.is_empty() {
                        view! { <p class="gpu-holders-none">"No process holds it."</p> }.into_any()
                    } else {
                        let items = lines
                            .iter()
                            .map(|(text, intruder)| view! { <li class:holder-intruder=*intruder>{text.clone()}</li> })
                            .collect_view();
                        view! { <ul class="gpu-holders-list">{items}</ul> }.into_any()
                    }
                })
            }}
        </section>
    }
}

/// One holder's line, and whether it intrudes on `held` (the reservation in force on the GPU, and the
/// time it was in force at).
fn holder_line(p: &GpuProcess, held: Option<&(Reservation, u64)>, now_ms: u64) -> (String, bool) {
    let memory = or_na(p.used_memory, format_bytes);
    if p.redacted {
        return (format!("someone (sign in to see) · {memory}"), false);
    }
    let mut parts = vec![p.user_name().to_owned()];
    if let Some(unix) = p.unix_user_if_other() {
        parts[0] = format!("{} (as {unix})", p.user_name());
    }
    parts.push(memory);
    parts.extend(p.workload.as_ref().and_then(shared::workload::describe));
    if let Some(hold) = p.idle {
        parts.push(format!("idle for {}", shared::time::duration(now_ms.saturating_sub(hold.since_ms))));
    }
    parts.push(format!("PID {}", p.pid));
    let intruder = held.is_some_and(|(r, at)| shared::reservations::is_intruder(r, p, *at));
    if let Some((r, _)) = held.filter(|_| intruder) {
        let holder = if r.redacted { "someone".to_owned() } else { r.user.clone() };
        parts.push(format!("⚠ runs here while {holder} has it reserved"));
    }
    (parts.join(" · "), intruder)
}

/// `Reserve` (operators: the reservation form with this GPU ticked) and `Run in the Lab` (the Lab
/// with this GPU picked), beside the card's heading; a lost GPU's card has neither.
#[component]
fn CardActions(index: u32) -> impl IntoView {
    let view = use_context::<ViewSignals>();
    let session = use_context::<Session>();
    let may_book = move || session.is_some_and(|s| s.may_change(Role::Operator));
    let reserve = move |_| {
        let Some(view) = view else { return };
        view.reserve_gpus.set(vec![index]);
        request_animation_frame(|| {
            if let Some(form) = document().get_element_by_id("reservation-form") {
                form.scroll_into_view();
            }
            let first = document().query_selector("#reservation-form .reservation-start").ok().flatten();
            if let Some(input) = first.and_then(|i| i.dyn_into::<web_sys::HtmlElement>().ok()) {
                let _ = input.focus();
            }
        });
    };
    let lab = move |_| {
        if let Some(view) = view {
            view.lab_on(index);
        }
    };
    view! {
        <div class="gpu-card-actions">
            <Show when=may_book>
                <button type="button" class="small-button card-reserve" on:click=reserve>"Reserve"</button>
            </Show>
            <button type="button" class="small-button card-lab" on:click=lab>"Run in the Lab"</button>
        </div>
    }
}

/// The level class of the worst finding, for a card's border.
fn worst_class(findings: &[shared::severity::Finding]) -> &'static str {
    let level = shared::severity::worst(findings);
    if level == shared::severity::Level::Ok { "" } else { level.class() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_reads_draw_over_limit_or_na() {
        let text = |sample: &DeviceSample| {
            let (draw, limit) = power_halves(Some(sample));
            draw + &limit
        };
        let mut sample =
            DeviceSample { power_draw_mw: Some(312_000), power_limit_mw: Some(700_000), ..Default::default() };
        assert_eq!(text(&sample), "312 W / 700 W");
        sample.power_limit_mw = None;
        assert_eq!(text(&sample), "312 W / n/a");
        sample.power_draw_mw = None;
        assert_eq!(text(&sample), "n/a");
        assert_eq!(power_halves(None), ("n/a".to_owned(), String::new()));
    }

    #[test]
    fn capability_and_codecs_read_like_nvidia_smi() {
        let sample = DeviceSample { encoder_util: Some(0), decoder_util: Some(12), ..Default::default() };
        assert_eq!(encoder_decoder(&sample), "0% / 12%");
        assert_eq!(encoder_decoder(&DeviceSample::default()), "n/a");
        assert_eq!(format_capability(ComputeCapability { major: 9, minor: 0 }), "9.0");
    }
}
