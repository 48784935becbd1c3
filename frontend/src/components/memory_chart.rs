//! A device's memory used over the last five minutes, drawn with plotters on a `<canvas>`.

use leptos::{html, logging, prelude::*};
use shared::{HISTORY_WINDOW_MS, MemoryRing, bridge::AttachedProcess};
use web_sys::HtmlCanvasElement;

use crate::{
    components::chart::{BandPoint, LivePacer, TimeChart, gib_ticks},
    hooks::{
        bridge::Bridge,
        theme::Theme,
        visible::{use_box_size, use_on_screen},
    },
    state::DashboardState,
};

const GIB: f64 = (1u64 << 30) as f64;

/// Memory used by GPU `index`, with a tick where a PyTorch span began. Redrawn at once when
/// the theme, the window size, those spans or the device's total change; for new samples only
/// once they have moved the line by a pixel, taking turns with the other charts; and
/// only while on screen (off screen it waits, and draws its latest points once scrolled to).
#[component]
pub fn MemoryChart(state: ReadSignal<DashboardState>, index: u32, theme: ReadSignal<Theme>) -> impl IntoView {
    let canvas_ref = NodeRef::<html::Canvas>::new();
    // Only this device's revision: other GPUs' ticks do not redraw this chart.
    let revision =
        Memo::new(move |_| state.with(|s| s.device(index).map(|d| (d.memory_revision, d.info.memory_total))));
    let box_size = use_box_size(canvas_ref);
    // Where attached PyTorch processes started spans on this GPU: ticks on the chart's top edge.
    let bridge = use_context::<Bridge>();
    let spans =
        Memo::new(move |_| bridge.map(|b| b.processes.with(|list| span_starts(list, index))).unwrap_or_default());
    let on_screen = use_on_screen(canvas_ref);

    let mut draws = 0u32;
    let mut pacer = LivePacer::<DrawKey>::default();
    Effect::new(move |_| {
        // `get`, not `track`: tracking a memo does not run it, so it would
        // never subscribe to `state` and never change.
        let total = revision.get().map(|(_, total)| total);
        let key = DrawKey {
            theme: theme.get(),
            size: box_size.get(),
            total,
            spans: spans.with(|s| (s.len(), s.last().copied())),
        };
        if !on_screen.get() {
            pacer.off_screen();
            return;
        }
        let (Some(canvas), Some(size)) = (canvas_ref.get(), key.size) else {
            return;
        };
        // New samples are due once they moved the line a pixel: a 5-minute axis does every few hundred ms.
        let pixel_ms = HISTORY_WINDOW_MS as f64 / f64::from(canvas.width().max(1));
        let seq = state.with_untracked(|s| s.seq);
        if !pacer.draw_now(key, js_sys::Date::now(), seq, |elapsed| elapsed >= pixel_ms) {
            return;
        }
        let drawn = state.with_untracked(|s| {
            let device = s.device(index)?;
            spans.with_untracked(|spans| Some(draw(&canvas, size, &device.memory, device.info.memory_total, spans)))
        });
        match drawn {
            Some(Ok(())) => {
                draws += 1;
                let _ = canvas.set_attribute("data-draws", &draws.to_string());
            }
            Some(Err(err)) => {
                logging::warn!("gpudash: cannot draw the memory chart of GPU {index}: {err}");
            }
            None => {}
        }
    });

    view! {
        <canvas
            node_ref=canvas_ref
            class="mem-chart"
            role="img"
            aria-label=format!("Memory used by GPU {index} over the last 5 minutes")
        ></canvas>
    }
}

/// What, besides new samples, redraws a memory chart at once.
#[derive(Debug, Clone, Copy, PartialEq)]
struct DrawKey {
    theme: Theme,
    /// The canvas's CSS box.
    size: Option<(f64, f64)>,
    total: Option<u64>,
    /// How many span starts there are and the newest.
    spans: (usize, Option<u64>),
}

/// Start times (ms since the epoch) of the recent spans that ran on GPU `index`, oldest first.
fn span_starts(processes: &[AttachedProcess], index: u32) -> Vec<u64> {
    let mut starts: Vec<u64> = processes
        .iter()
        .flat_map(|p| {
            p.recent_spans.iter().filter(|s| p.devices.iter().any(|d| d.torch.device == s.device && d.gpu == index))
        })
        .map(|s| s.start_ms)
        .collect();
    shared::order::sort(&mut starts);
    starts
}

fn draw(
    canvas: &HtmlCanvasElement,
    box_size: (f64, f64),
    memory: &MemoryRing,
    memory_total: u64,
    spans: &[u64],
) -> Result<(), Box<dyn std::error::Error>> {
    let newest = memory.newest_ms().unwrap_or_default();
    let points: Vec<BandPoint> = memory
        .iter()
        .map(|p| {
            let used = p.memory_used as f64 / GIB;
            // Milliseconds ago, as a negative offset from the newest point.
            BandPoint { x: p.timestamp_ms as i64 - newest as i64, low: 0.0, mid: used, high: used }
        })
        .collect();
    // A device without a reported total still gets a usable scale.
    let y_max =
        if memory_total > 0 { memory_total as f64 / GIB } else { points.iter().map(|p| p.high).fold(1.0, f64::max) };
    let window = HISTORY_WINDOW_MS as i64;
    let markers: Vec<i64> = spans.iter().map(|&t| t as i64 - newest as i64).collect();
    TimeChart {
        markers: &markers,
        x_range: -window..0,
        x_ticks: (0..=6).map(|k| -window + k * window / 6).collect(),
        x_label: &|x| format!("{}", x / 1000),
        x_desc: Some("seconds ago"),
        y_max,
        y_desc: "GiB",
        // Whole binary steps (0, 32, 64, 96, 128 GiB on a 141 GiB H200), by the rule the Lab's byte axes use.
        y_ticks: gib_ticks(y_max, 5),
        compact: false,
        band_opacity: 0.18,
        box_size,
    }
    .draw(canvas, &[&points])
}
