//! `#gpu-grid`: the overview for many GPUs, one tile per GPU with its state in words and colour,
//! filtered by state and owner, so that 64 GPUs fit on one screen. A tile opens the GPU's card
//! under the grid. The overview's table is `overview.rs`.

use std::collections::BTreeSet;

use leptos::prelude::*;
use shared::activity::gpu_state;

use crate::{
    components::overview::{state_class, state_words},
    hooks::{reservations::Reservations, theme::Theme, url::ViewSignals},
    split::{self, Lazily},
    state::{
        DashboardState,
        url::{Layout, STATE_FILTERS},
    },
};

/// Above this many GPUs the overview starts as the grid.
pub const COMPACT_ABOVE: usize = 16;

/// What one tile shows.
#[derive(Debug, Clone, PartialEq)]
struct Tile {
    /// `free`, `busy`, `held-idle`, `unhealthy` or `lost`.
    class: &'static str,
    words: String,
    /// Why a held-idle GPU reads so beside a high util ([`shared::activity::held_idle_reason`]).
    why: Option<String>,
    reserved: bool,
    util: Option<u32>,
    memory: Option<f64>,
    owners: BTreeSet<String>,
}

impl Tile {
    fn passes(&self, state: Option<&str>, owner: Option<&str>) -> bool {
        let state_ok = match state {
            None => true,
            Some("reserved") => self.reserved,
            Some(wanted) => self.class == wanted,
        };
        state_ok && owner.is_none_or(|o| self.owners.contains(o))
    }

    /// "util 98% · mem 71%", or what is known of it.
    fn figures(&self) -> String {
        let util = self.util.map_or_else(|| "util n/a".to_owned(), |u| format!("util {u}%"));
        let memory = self.memory.map_or_else(|| "mem n/a".to_owned(), |m| format!("mem {:.0}%", m * 100.0));
        format!("{util} · {memory}")
    }

    /// " · held by ana, bo": who holds it, for its tooltip (empty when nobody, or nobody the viewer
    /// is told about).
    fn holders(&self) -> String {
        if self.owners.is_empty() {
            return String::new();
        }
        format!(" · held by {}", self.owners.iter().cloned().collect::<Vec<_>>().join(", "))
    }

    /// "98% · 71%": util and memory, as the grid's legend reads them.
    fn short_figures(&self) -> String {
        let util = self.util.map_or_else(|| "n/a".to_owned(), |u| format!("{u}%"));
        let memory = self.memory.map_or_else(|| "n/a".to_owned(), |m| format!("{:.0}%", m * 100.0));
        format!("{util} · {memory}")
    }
}

fn tile(state: &DashboardState, reservations: Option<Reservations>, index: u32) -> Tile {
    let device = state.device(index);
    let latest = device.and_then(|d| d.latest.as_ref());
    let row = gpu_state(index, latest, &state.processes);
    let unhealthy = state.unhealthy(index);
    let holder = reservations.and_then(|r| r.holder_of(index)).map(|r| if r.redacted { String::new() } else { r.user });
    Tile {
        class: state_class(row, unhealthy.is_some()),
        words: state_words(row, unhealthy.as_deref(), holder.as_deref()),
        why: shared::activity::held_idle_reason(index, latest, &state.processes),
        reserved: holder.is_some(),
        util: latest.and_then(|s| s.gpu_util),
        memory: latest.and_then(|s| s.memory_fraction(device.map_or(0, |d| d.info.memory_total))),
        owners: state.processes_on(index).filter(|p| !p.redacted).map(|p| p.user_name().to_owned()).collect(),
    }
}

/// The grid, its filter, and the cards opened from it.
#[component]
pub fn GpuGrid(state: ReadSignal<DashboardState>, indices: Memo<Vec<u32>>, theme: ReadSignal<Theme>) -> impl IntoView {
    let view = expect_context::<ViewSignals>();
    let reservations = use_context::<Reservations>();
    let owners = Memo::new(move |_| {
        state.with(|s| {
            s.processes.iter().filter(|p| !p.redacted).map(|p| p.user_name().to_owned()).collect::<BTreeSet<_>>()
        })
    });
    let shown = Memo::new(move |_| {
        let (wanted, owner) = (view.state.get(), view.owner.get());
        // No filter: every GPU, without rating each at every tick.
        if wanted.is_none() && owner.is_none() {
            return indices.with(Vec::len);
        }
        state.with(|s| {
            indices.with(|all| {
                all.iter()
                    .copied()
                    .filter(|&i| tile(s, reservations, i).passes(wanted.as_deref(), owner.as_deref()))
                    .count()
            })
        })
    });
    let pick = |signal: RwSignal<Option<String>>| {
        move |ev| {
            let value = event_target_value(&ev);
            signal.set((!value.is_empty()).then_some(value));
        }
    };
    view! {
        <div class="grid-filter" role="group" aria-label="Filter the GPUs">
            <label>
                "State "
                <select id="grid-state" prop:value=move || view.state.get().unwrap_or_default() on:change=pick(view.state)>
                    <option value="">"any"</option>
                    {STATE_FILTERS.into_iter().map(|s| view! { <option value=s>{s.replace('-', " ")}</option> }).collect_view()}
                </select>
            </label>
            <label>
                "Owner "
                <select id="grid-owner" prop:value=move || view.owner.get().unwrap_or_default() on:change=pick(view.owner)>
                    <option value="">"anyone"</option>
                    {move || owners.get().into_iter().map(|o| view! { <option>{o}</option> }).collect_view()}
                </select>
            </label>
            <span class="grid-legend">"Each tile: GPU, util · memory used, state"</span>
            <span class="grid-count" aria-live="polite">
                {move || format!("{} of {} GPUs", shown.get(), indices.with(Vec::len))}
            </span>
        </div>
        <ul id="gpu-grid" class="gpu-grid">
            <For each=move || indices.get() key=|index| *index let:index>
                <GridTile state=state index=index />
            </For>
        </ul>
        <div class="grid-cards">
            <For each=move || view.cards.get() key=|index| *index let:index>
                <div class="gpu-row-detail grid-card" id=format!("gpu-detail-{index}")>
                    <Lazily page=split::device_card(state, index, theme) />
                </div>
            </For>
        </div>
    }
}

/// `li.gpu-tile`: a button that opens or closes the GPU's card; hidden while the filter leaves it out.
#[component]
fn GridTile(state: ReadSignal<DashboardState>, index: u32) -> impl IntoView {
    let view = expect_context::<ViewSignals>();
    let reservations = use_context::<Reservations>();
    let tile = Memo::new(move |_| state.with(|s| tile(s, reservations, index)));
    let hidden = move || {
        let (wanted, owner) = (view.state.get(), view.owner.get());
        !tile.with(|t| t.passes(wanted.as_deref(), owner.as_deref()))
    };
    let open = Memo::new(move |_| view.cards.with(|c| c.contains(&index)));
    let toggle = move |_| {
        view.cards.update(|c| {
            if !c.remove(&index) {
                c.insert(index);
            }
        });
    };
    // The tooltip spells out what the tile shows in short; its figures change at every tick, so it is
    // written when the pointer or the focus comes to the tile, not into 64 tiles at every tick.
    let button = NodeRef::<leptos::html::Button>::new();
    let write_title = move || {
        if let Some(button) = button.get_untracked() {
            let text = tile.with_untracked(|t| {
                let why = t.why.as_ref().map(|why| format!(" ({why})")).unwrap_or_default();
                let held = t.holders();
                format!("GPU {index}: {}{why} · {}{held}", t.words, t.figures())
            });
            if button.title() != text {
                button.set_title(&text);
            }
        }
    };
    view! {
        <li class=move || format!("gpu-tile state-{}", tile.with(|t| t.class)) class:reserved=move || tile.with(|t| t.reserved)
            data-index=index hidden=hidden>
            <button type="button" class="gpu-tile-button" aria-expanded=move || open.get().to_string()
                aria-controls=format!("gpu-detail-{index}") node_ref=button on:click=toggle
                on:pointerenter=move |_| write_title() on:focus=move |_| write_title()>
                <span class="tile-gpu">{format!("GPU {index}")}</span>
                <span class="tile-figures">
                    <span class="tile-figures-text">{move || tile.with(Tile::short_figures)}</span>
                </span>
                <span class="tile-state">{move || tile.with(|t| t.words.clone())}</span>
            </button>
        </li>
    }
}

/// `#layout-toggle`: the grid or the table, whatever the number of GPUs chose.
#[component]
pub fn LayoutToggle(compact: Memo<bool>) -> impl IntoView {
    let view = expect_context::<ViewSignals>();
    let flip = move |_| view.layout.set(if compact.get_untracked() { Layout::Table } else { Layout::Grid });
    view! {
        <button id="layout-toggle" type="button" class="small-button" aria-pressed=move || compact.get().to_string()
            on:click=flip>
            "Compact grid"
        </button>
    }
}

/// Whether the overview is the grid: as the reader chose, or for more than [`COMPACT_ABOVE`] GPUs.
pub fn is_compact(layout: Layout, gpus: usize) -> bool {
    match layout {
        Layout::Auto => gpus > COMPACT_ABOVE,
        Layout::Grid => true,
        Layout::Table => false,
    }
}
