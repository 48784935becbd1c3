//! What the SMs really do: SM and tensor activity (NVML's GPM) beside GPU util on each
//! card, and the idle-but-held flag on cards and process rows.

use leptos::prelude::*;
use shared::activity::{GpuState, IdleHold, gpu_state};
use shared::processes::GpuProcess;
use shared::units::format_bytes;

use crate::components::format;
use crate::state::DashboardState;

/// Why the three figures differ, for the hover text.
const EXPLAIN: &str = "GPU util: share of time any kernel ran, however small. \
SM activity: share of time the SMs had work (GPM). Tensor activity: share of time the tensor cores \
(bf16/fp16/tf32 matmuls) were busy. A Python loop of tiny kernels reads 30% util and ~0% SM activity; \
a large bf16 GEMM reads ~100% in all three.";

/// A percent from GPM with one decimal below 10 %, where "0%" and "0.4%" mean different things.
fn activity_percent(value: f64) -> String {
    if value < 10.0 { format!("{value:.1}%") } else { format!("{value:.0}%") }
}

/// "idle, holding 6.00 GiB for 12m": a flagged process, as of `now_ms`.
pub fn idle_text(process: &GpuProcess, hold: IdleHold, now_ms: u64) -> String {
    format!(
        "idle, holding {} for {}",
        shared::units::or_na(process.used_memory, format_bytes),
        format::duration(now_ms.saturating_sub(hold.since_ms))
    )
}

/// SM and tensor activity for GPU `index`, or n/a with the reason; and "held idle" when it is.
#[component]
pub fn ActivityFigures(state: ReadSignal<DashboardState>, index: u32) -> impl IntoView {
    let activity = Memo::new(move |_| state.with(|s| s.device(index)?.latest.as_ref()?.activity.clone()));
    let figure = move |read: fn(&shared::activity::Activity) -> Option<f64>| {
        move || {
            activity.with(|a| match a {
                Some(a) if a.unavailable.is_none() => read(a).map_or_else(format::na, activity_percent),
                _ => format::na(),
            })
        }
    };
    let reason = move || activity.with(|a| a.as_ref().and_then(|a| a.unavailable.clone()));
    let held = Memo::new(move |_| {
        state.with(|s| {
            let latest = s.device(index).and_then(|d| d.latest.as_ref());
            (gpu_state(index, latest, &s.processes) == GpuState::HeldIdle).then(|| {
                let now = latest.map_or(0, |l| l.timestamp_ms);
                let on_it: Vec<_> = s.processes_on(index).collect();
                let since = on_it.iter().filter_map(|p| p.idle.map(|h| h.since_ms)).min().unwrap_or(now);
                format!(
                    "Held idle: {} for {}",
                    format_bytes(shared::activity::idle_memory(&on_it)),
                    format::duration(now.saturating_sub(since))
                )
            })
        })
    });
    view! {
        <dl class="metrics metrics-activity" title=EXPLAIN>
            <div class="metric">
                <dt class="metric-label">"SM activity " <span class="info" aria-label=EXPLAIN>"(?)"</span></dt>
                <dd class="metric-value sm-active">{figure(|a| a.sm_active)}</dd>
            </div>
            <div class="metric">
                <dt class="metric-label">"Tensor activity"</dt>
                <dd class="metric-value tensor-active">{figure(|a| a.tensor_active)}</dd>
            </div>
            <div class="metric">
                <dt class="metric-label">"DRAM bandwidth"</dt>
                <dd class="metric-value dram-active">{figure(|a| a.dram_active)}</dd>
            </div>
        </dl>
        <Show when=move || reason().is_some()>
            <p class="activity-na">{move || format!("Activity n/a: {}", reason().unwrap_or_default())}</p>
        </Show>
        <Show when=move || held.with(Option::is_some)>
            <p class="held-idle" role="status">{move || held.get().unwrap_or_default()}</p>
        </Show>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_activity_keeps_a_decimal() {
        assert_eq!(activity_percent(0.04), "0.0%");
        assert_eq!(activity_percent(0.4), "0.4%");
        assert_eq!(activity_percent(96.6), "97%");
    }
}
