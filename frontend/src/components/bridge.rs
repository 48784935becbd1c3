//! `#pytorch-processes`: what each attached PyTorch process holds on each GPU:
//! allocated, reserved by the caching allocator, and what NVML counts (the
//! difference being the CUDA context and non-PyTorch memory), its spans, and a
//! remote empty_cache.

use leptos::{prelude::*, task::spawn_local};
use shared::{
    auth::Role,
    bridge::{AttachedDevice, AttachedProcess, EmptyCacheState, SpanSummary},
    processes::shorten,
    units::{format_bytes, or_na, three_digits},
};

use crate::{
    components::{bridge_allocator::AllocatorMap, format},
    hooks::{bridge::Bridge, session::Session},
    split::{self, Lazily},
    state::DashboardState,
};

/// Process names longer than this are cut (the full one is the tooltip).
const NAME_CHARS: usize = 48;

#[component]
pub fn BridgePanel(state: ReadSignal<DashboardState>, bridge: Bridge) -> impl IntoView {
    let ids = Memo::new(move |_| bridge.processes.with(|l| l.iter().map(|p| p.id).collect::<Vec<_>>()));
    view! {
        <section id="pytorch-processes" class="section" aria-labelledby="pytorch-title">
            <h2 id="pytorch-title" class="section-title">"PyTorch processes"</h2>
            <Show when=move || bridge.error.with(Option::is_some)>
                <p class="notice bridge-error">{move || bridge.error.get().unwrap_or_default()}</p>
            </Show>
            <Show when=move || ids.with(Vec::is_empty)>
                <p class="placeholder bridge-none">
                    "No PyTorch process attached. Call " <code>"gpudash.attach()"</code>
                    " in a training script to see its allocator here."
                </p>
            </Show>
            <For each=move || ids.get() key=|id| *id let:id>
                <Lazily page=split::bridge_process(state, bridge, id) />
            </For>
        </section>
    }
}

#[component]
pub fn BridgeProcess(state: ReadSignal<DashboardState>, bridge: Bridge, id: u64) -> impl IntoView {
    let process = Memo::new(move |_| bridge.processes.with(|l| l.iter().find(|p| p.id == id).cloned()));
    let field =
        move |f: fn(&AttachedProcess) -> String| move || process.with(|p| p.as_ref().map(f).unwrap_or_default());
    let pid = move || process.with(|p| p.as_ref().map_or(0, |p| p.pid));
    let stale = move || process.with(|p| p.as_ref().is_some_and(|p| p.stale));
    let unmatched = move || process.with(|p| p.as_ref().is_some_and(|p| !p.pid_matched));
    let rows = move || {
        let Some(p) = process.get() else { return Vec::new() };
        p.devices
            .into_iter()
            .map(|device| {
                let total = state.with(|s| s.device(device.gpu).map(|d| d.info.memory_total)).unwrap_or(0);
                view! { <DeviceRow pid=p.pid device=device gpu_total=total /> }
            })
            .collect::<Vec<_>>()
    };
    let spans = move || process.with(|p| p.as_ref().map(|p| p.spans.clone()).unwrap_or_default());
    view! {
        <div class="bridge-process" class:bridge-stale=stale data-pid=pid data-id=id>
            <div class="bridge-head">
                <span class="bridge-pid">{move || format!("PID {}", pid())}</span>
                <span class="bridge-user">{field(|p| p.user.clone().unwrap_or_else(|| "?".into()))}</span>
                <span class="bridge-name mono" title=field(|p| p.process_name.clone())>
                    {field(|p| shorten(&p.process_name, NAME_CHARS))}
                </span>
                <span class="bridge-versions">
                    {field(|p| format!("torch {} · CUDA {}", p.torch_version, or_na(p.cuda_version.clone(), |v| v)))}
                </span>
                <Show when=stale>
                    <span
                        class="badge badge-stale"
                        title=field(|p| format!("no report for three intervals; last seen {}", format::stamp(p.last_seen_ms as f64)))
                    >
                        "stale"
                    </span>
                </Show>
                <BridgeEmptyCache bridge=bridge process=process />
            </div>
            <Show when=unmatched>
                <p class="bridge-caveat">
                    "NVML does not list this PID: the process probably runs in another PID namespace (a container); NVML figures unavailable"
                </p>
            </Show>
            <div class="table-scroll">
                <table class="bridge-table">
                    <thead>
                        <tr>
                            <th>"GPU"</th>
                            <th class="bridge-bar-col">"Memory"</th>
                            <th><span class="swatch swatch-allocated"></span>"Allocated"</th>
                            <th><span class="swatch swatch-cached"></span>"Reserved"</th>
                            <th>"NVML used"</th>
                            <th><span class="swatch swatch-overhead"></span>"Overhead"</th>
                        </tr>
                    </thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
            <AllocatorMap bridge=bridge process=process />
            <Show when=move || process.with(|p| p.as_ref().is_some_and(|p| !p.spans.is_empty()))>
                <SpanTable spans=Signal::derive(spans) />
            </Show>
        </div>
    }
}

/// `tr.bridge-row`: one device of one process, with its stacked bar.
#[component]
fn DeviceRow(pid: u32, device: AttachedDevice, gpu_total: u64) -> impl IntoView {
    let t = &device.torch;
    let bar = MemoryBar::new(t.allocated, t.reserved, device.nvml_used, gpu_total);
    let title = format!(
        "allocated {} · cached by the allocator {} · CUDA context and other memory {}",
        format_bytes(t.allocated),
        format_bytes(t.reserved.saturating_sub(t.allocated)),
        or_na(device.overhead, format_bytes)
    );
    view! {
        <tr class="bridge-row" data-pid=pid data-gpu=device.gpu>
            <td class="bridge-gpu">{format!("GPU {}", device.gpu)}</td>
            <td class="bridge-bar-cell">
                <div class="bridge-bar" title=title>
                    <div class="bridge-seg seg-allocated" style:width=format!("{:.2}%", bar.allocated)></div>
                    <div class="bridge-seg seg-cached" style:width=format!("{:.2}%", bar.cached)></div>
                    <div class="bridge-seg seg-overhead" style:width=format!("{:.2}%", bar.overhead)></div>
                </div>
            </td>
            <td class="bridge-allocated">{format_bytes(t.allocated)}</td>
            <td class="bridge-reserved">{format_bytes(t.reserved)}</td>
            <td class="bridge-nvml">{or_na(device.nvml_used, format_bytes)}</td>
            <td class="bridge-overhead">{or_na(device.overhead, format_bytes)}</td>
        </tr>
    }
}

/// Widths (percent of the scale) of the stacked bar's three parts.
#[derive(Debug, Clone, Copy, PartialEq)]
struct MemoryBar {
    allocated: f64,
    cached: f64,
    overhead: f64,
}

impl MemoryBar {
    /// Scaled to the GPU's memory when known, else to the largest figure.
    fn new(allocated: u64, reserved: u64, nvml_used: Option<u64>, gpu_total: u64) -> Self {
        let reserved = reserved.max(allocated);
        let used = nvml_used.unwrap_or(reserved).max(reserved);
        let scale = if gpu_total > 0 { gpu_total.max(used) } else { used.max(1) } as f64;
        let pct = |bytes: u64| bytes as f64 / scale * 100.0;
        Self { allocated: pct(allocated), cached: pct(reserved - allocated), overhead: pct(used - reserved) }
    }
}

/// `table.span-table`: per span name, how long it takes and what memory it moves.
#[component]
fn SpanTable(spans: Signal<Vec<SpanSummary>>) -> impl IntoView {
    view! {
        <table class="span-table">
            <thead>
                <tr>
                    <th>"Span"</th>
                    <th>"Count"</th>
                    <th>"p50"</th>
                    <th>"p99"</th>
                    <th>"Last Δ memory"</th>
                    <th>"Peak"</th>
                </tr>
            </thead>
            <tbody>
                {move || spans.get().into_iter().map(|s| view! {
                    <tr class="span-row">
                        <td class="span-name mono">{s.name}</td>
                        <td class="span-count">{s.count}</td>
                        <td class="span-p50">{millis(s.p50_ms)}</td>
                        <td class="span-p99">{millis(s.p99_ms)}</td>
                        <td class="span-delta">{signed_bytes(s.last_memory_delta)}</td>
                        <td
                            class="span-peak"
                            title=s.max_memory_peak_bound.then_some("the process's peak so far: the call did not raise it, so its own peak is at most this")
                        >
                            {format!("{}{}", if s.max_memory_peak_bound { "≤ " } else { "" }, format_bytes(s.max_memory_peak))}
                        </td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// `button.bridge-empty-cache` and what became of the last request (operators only).
#[component]
fn BridgeEmptyCache(bridge: Bridge, process: Memo<Option<AttachedProcess>>) -> impl IntoView {
    let session = expect_context::<Session>();
    let allowed = move || process.with(|p| p.as_ref().is_some_and(|p| p.allow_remote_empty_cache));
    let state = move || process.with(|p| p.as_ref().and_then(|p| p.empty_cache));
    let error = RwSignal::new(None::<String>);
    let working = RwSignal::new(false);
    let click = move |_| {
        let Some(id) = process.with_untracked(|p| p.as_ref().map(|p| p.id)) else { return };
        working.set(true);
        error.set(None);
        spawn_local(async move {
            if let Err(failure) = bridge.empty_cache(id).await {
                session.unauthorized(&failure);
                error.try_set(Some(failure.message));
            }
            working.try_set(false);
        });
    };
    let title = move || {
        if allowed() {
            "Ask the process to call torch.cuda.empty_cache() with its next report".to_owned()
        } else {
            "the process attached without allow_remote_empty_cache=True".to_owned()
        }
    };
    view! {
        <Show when=move || session.may_change(Role::Operator)>
            <span class="bridge-cache">
                <button
                    type="button"
                    class="bridge-empty-cache small-button"
                    disabled=move || !allowed() || working.get()
                    title=title
                    on:click=click
                >
                    "empty_cache"
                </button>
                {move || {
                    let failed = error.with(Option::is_some);
                    let text = match (error.get(), working.get(), state()) {
                        (Some(text), _, _) => text,
                        (None, true, _) => "requested…".to_owned(),
                        (None, false, Some(s)) => cache_text(s),
                        (None, false, None) => return None,
                    };
                    Some(view! { <span class="bridge-cache-result" class:empty-cache-error=failed>{text}</span> })
                }}
            </span>
        </Show>
    }
}

/// "requested…" until the process reports back, then what it released (or that it withdrew consent).
fn cache_text(state: EmptyCacheState) -> String {
    match state.done_ms {
        _ if state.refused => "not delivered: the process withdrew its consent".to_owned(),
        None => "requested…".to_owned(),
        Some(_) => format!("released {}", format_bytes(state.released_bytes.unwrap_or(0))),
    }
}

/// "+1.00 GiB", "−512.00 MiB", "0 B".
fn signed_bytes(delta: i64) -> String {
    match delta {
        0 => format_bytes(0),
        d if d > 0 => format!("+{}", format_bytes(d.unsigned_abs())),
        d => format!("−{}", format_bytes(d.unsigned_abs())),
    }
}

/// A span's GPU time: "0.424 ms", "12.3 ms", "1.50 s".
fn millis(ms: f64) -> String {
    if ms >= 1000.0 { format!("{} s", three_digits(ms / 1000.0)) } else { format!("{} ms", three_digits(ms)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_splits_allocated_cached_and_overhead() {
        let gib = 1u64 << 30;
        let bar = MemoryBar::new(2 * gib, 6 * gib, Some(7 * gib), 10 * gib);
        assert_eq!(bar, MemoryBar { allocated: 20.0, cached: 40.0, overhead: 10.0 });
        let bar = MemoryBar::new(gib, 2 * gib, None, 0);
        assert_eq!(bar, MemoryBar { allocated: 50.0, cached: 50.0, overhead: 0.0 });
    }

    #[test]
    fn figures_read_signed_and_timed() {
        assert_eq!(signed_bytes(-(512 << 20)), format!("−{}", format_bytes(512 << 20)));
        assert!(signed_bytes(1 << 30).starts_with('+'));
        assert_eq!(millis(0.4242), "0.424 ms");
        assert_eq!(millis(1500.0), "1.50 s");
        let done =
            EmptyCacheState { id: 1, requested_ms: 1, done_ms: Some(2), released_bytes: Some(1 << 30), refused: false };
        assert_eq!(cache_text(done), format!("released {}", format_bytes(1 << 30)));
        assert_eq!(cache_text(EmptyCacheState { done_ms: None, ..done }), "requested…");
        assert!(cache_text(EmptyCacheState { refused: true, ..done }).contains("withdrew its consent"));
    }
}
