//! `div.alloc-map`: why a PyTorch process's reserved memory is larger than its allocated memory:
//! internal fragmentation and the largest free block in numbers (from the list), the caching
//! allocator's segments drawn as a strip (width by size, filled by allocated bytes) once the reader
//! opens them (the whole map comes from `GET /api/bridge/{id}`, fetched again for each new map while
//! open), a "Refresh map" button, and the process's out-of-memory errors ("OOM at 14:02: asked for …").

use leptos::{prelude::*, task::spawn_local};
use shared::{
    allocator::{AllocatorView, DeviceMap, LISTED_SEGMENTS, MapReason, MapTotals, OomRecord, SegmentPool},
    auth::Role,
    bridge::AttachedProcess,
    units::format_bytes,
};

use crate::{
    components::format,
    hooks::{bridge::Bridge, session::Session},
};

/// The allocator map and the OOM lines of one process (nothing when it shares no map and had no OOM).
#[component]
pub fn AllocatorMap(bridge: Bridge, process: Memo<Option<AttachedProcess>>) -> impl IntoView {
    let shares = move || process.with(|p| p.as_ref().is_some_and(|p| p.share_allocator_map));
    // The newest three, newest first.
    let ooms = move || {
        process
            .with(|p| p.as_ref().map(|p| p.ooms.iter().rev().take(3).copied().collect::<Vec<_>>()).unwrap_or_default())
    };
    let segments = use_segments(bridge, process);
    let maps = move || {
        let Some(view) = process.with(|p| p.as_ref().and_then(|p| p.allocator.clone())) else {
            return Vec::new();
        };
        view.maps
            .into_iter()
            .map(|map| view! { <DeviceFigures device=map.device totals=map.totals segments=segments /> })
            .collect::<Vec<_>>()
    };
    let taken = move || {
        process.with(|p| {
            let view = p.as_ref()?.allocator.as_ref()?;
            let why = match view.reason {
                MapReason::Periodic => "",
                MapReason::Requested => " (requested)",
                MapReason::Oom => " (at the out-of-memory error)",
            };
            Some(format!(
                "map of {}{why}; the snapshot cost the process {:.1} ms",
                format::stamp_seconds(view.taken_ms as f64),
                view.cost_ms
            ))
        })
    };
    let has_map = move || process.with(|p| p.as_ref().is_some_and(|p| p.allocator.is_some()));
    view! {
        <For each=ooms key=|o: &OomRecord| o.at_ms let:oom>
            <OomLine oom=oom />
        </For>
        <Show when=shares>
            <div class="alloc-map">
                <div class="alloc-head">
                    <span class="alloc-title">"Allocator segments"</span>
                    <span class="alloc-taken">{move || taken().unwrap_or_else(|| "waiting for the first map…".into())}</span>
                    <Show when=has_map>
                        <button
                            type="button"
                            class="bridge-show-segments small-button"
                            aria-expanded=move || segments.open.get().to_string()
                            title="Draw the allocator's segments (loads this process's whole map)"
                            on:click=move |_| segments.open.update(|open| *open = !*open)
                        >
                            {move || if segments.open.get() { "Hide segments" } else { "Show segments" }}
                        </button>
                    </Show>
                    <RefreshMap bridge=bridge process=process />
                </div>
                <Show when=move || segments.open.get() && segments.error.with(Option::is_some)>
                    <p class="notice alloc-error">{move || segments.error.get().unwrap_or_default()}</p>
                </Show>
                {maps}
            </div>
        </Show>
    }
}

/// One process's whole map, loaded while the reader has its segments open.
#[derive(Debug, Clone, Copy)]
struct Segments {
    open: RwSignal<bool>,
    /// The detail's map, as last loaded.
    map: RwSignal<Option<AllocatorView>>,
    error: RwSignal<Option<String>>,
}

/// Loads the whole map when the segments are opened, and again when the list shows a newer one.
fn use_segments(bridge: Bridge, process: Memo<Option<AttachedProcess>>) -> Segments {
    let session = expect_context::<Session>();
    let segments = Segments { open: RwSignal::new(false), map: RwSignal::new(None), error: RwSignal::new(None) };
    let newest =
        Memo::new(move |_| process.with(|p| p.as_ref().and_then(|p| Some((p.id, p.allocator.as_ref()?.taken_ms)))));
    Effect::new(move |_| {
        let (open, Some((id, taken_ms))) = (segments.open.get(), newest.get()) else { return };
        if !open || segments.map.with_untracked(|m| m.as_ref().is_some_and(|m| m.taken_ms == taken_ms)) {
            return;
        }
        spawn_local(async move {
            match bridge.detail(id).await {
                Ok(detail) => {
                    segments.map.try_set(detail.allocator);
                    segments.error.try_set(None);
                }
                Err(failure) => {
                    session.unauthorized(&failure);
                    segments.error.try_set(Some(failure.message));
                }
            }
        });
    });
    segments
}

/// `p.bridge-oom`: "OOM at 14:02: asked for 2.10 GiB, largest free block 512 MiB, 3.40 GiB free in total (fragmented)".
#[component]
fn OomLine(oom: OomRecord) -> impl IntoView {
    let text = oom.describe(&format::stamp(oom.at_ms as f64));
    view! {
        <p class="bridge-oom" data-device=oom.device title=format::zone_caption()>
            {text}
        </p>
    }
}

/// One device's numbers (from the list), and its strip while the segments are open.
#[component]
fn DeviceFigures(device: u32, totals: MapTotals, segments: Segments) -> impl IntoView {
    let t = totals;
    let strip = move || {
        if !segments.open.get() {
            return None;
        }
        let map = segments.map.with(|m| m.as_ref()?.maps.iter().find(|m| m.device == device).cloned());
        Some(match map {
            Some(map) => strip(&map.folded(LISTED_SEGMENTS)).into_any(),
            None => view! { <p class="placeholder alloc-loading">"loading segments…"</p> }.into_any(),
        })
    };
    view! {
        <div class="alloc-device" data-device=device>
            {strip}
            <ul class="alloc-figures">
                <li class="alloc-totals">
                    {format!(
                        "{} reserved in {} segments ({} blocks), {} allocated",
                        format_bytes(t.reserved),
                        t.segments,
                        t.blocks,
                        format_bytes(t.allocated)
                    )}
                </li>
                <li class="alloc-frag">
                    {format!(
                        "internal fragmentation {:.1}%: {} free inside segments",
                        t.fragmentation() * 100.0,
                        format_bytes(t.free_in_segments)
                    )}
                </li>
                <li class="alloc-largest">{format!("largest free block {}", format_bytes(t.largest_free_block))}</li>
                <li class="alloc-new-segment">
                    {format!(
                        "an allocation larger than {} would need a new segment",
                        format_bytes(t.largest_free_block)
                    )}
                </li>
            </ul>
            <p class="alloc-explain">
                "Free blocks inside segments stay reserved: " <code>"torch.cuda.empty_cache()"</code>
                " returns only whole free segments to the driver; " <code>"expandable_segments:True"</code>
                " (in PYTORCH_CUDA_ALLOC_CONF) lets a segment grow instead of leaving gaps, and "
                <code>"max_split_size_mb"</code> " stops large free blocks from being split for small tensors."
            </p>
        </div>
    }
}

/// `div.alloc-strip`: a device's segments, width by size, filled by allocated bytes.
fn strip(map: &DeviceMap) -> impl IntoView + use<> {
    let t = map.totals;
    let reserved = t.reserved.max(1) as f64;
    let width = move |bytes: u64| format!("{:.3}%", bytes as f64 / reserved * 100.0);
    let fill = |allocated: u64, size: u64| format!("{:.1}%", allocated as f64 / size.max(1) as f64 * 100.0);
    let segments = map
        .segments
        .iter()
        .map(|s| {
            let pool = match s.pool {
                SegmentPool::Large => "large pool",
                SegmentPool::Small => "small pool",
            };
            let title = format!(
                "{} segment ({pool}{}{}, stream {}): {} allocated, {} free in {} blocks",
                format_bytes(s.size),
                if s.private_pool { ", private pool" } else { "" },
                if s.expandable { ", expandable" } else { "" },
                s.stream,
                format_bytes(s.allocated),
                format_bytes(s.free),
                s.blocks
            );
            view! {
                <div class="alloc-seg" class:alloc-small=s.pool == SegmentPool::Small style:width=width(s.size) title=title>
                    <div class="alloc-fill" style:width=fill(s.allocated, s.size)></div>
                </div>
            }
        })
        .collect::<Vec<_>>();
    let other = map.other.as_ref().map(|o| {
        let title = format!(
            "{} more segments, {} in all: {} allocated, {} free",
            o.segments,
            format_bytes(o.size),
            format_bytes(o.allocated),
            format_bytes(o.free)
        );
        view! {
            <div class="alloc-seg alloc-other" style:width=width(o.size) title=title>
                <div class="alloc-fill" style:width=fill(o.allocated, o.size)></div>
            </div>
        }
    });
    view! {
        <div class="alloc-strip" role="img" aria-label=format!("{} segments on device {}", t.segments, map.device)>
            {segments}
            {other}
        </div>
    }
}

/// `button.bridge-refresh-map`: asks the process for a map with its next report (operators).
#[component]
fn RefreshMap(bridge: Bridge, process: Memo<Option<AttachedProcess>>) -> impl IntoView {
    let session = expect_context::<Session>();
    let error = RwSignal::new(None::<String>);
    let working = RwSignal::new(false);
    let pending = move || process.with(|p| p.as_ref().and_then(|p| p.map_request).is_some_and(|r| r.done_ms.is_none()));
    let click = move |_| {
        let Some(id) = process.with_untracked(|p| p.as_ref().map(|p| p.id)) else { return };
        working.set(true);
        error.set(None);
        spawn_local(async move {
            if let Err(failure) = bridge.request_map(id).await {
                session.unauthorized(&failure);
                error.try_set(Some(failure.message));
            }
            working.try_set(false);
        });
    };
    view! {
        <Show when=move || session.may_change(Role::Operator)>
            <button
                type="button"
                class="bridge-refresh-map small-button"
                // Not disabled by a request still open: a process that went quiet never answers it.
                disabled=move || working.get()
                title="Ask the process for its allocator map now (torch.cuda.memory_snapshot(), summarized)"
                on:click=click
            >
                "Refresh map"
            </button>
            {move || {
                let text = error.get().or_else(|| pending().then(|| "requested…".to_owned()))?;
                Some(view! { <span class="bridge-map-result">{text}</span> })
            }}
        </Show>
    }
}
