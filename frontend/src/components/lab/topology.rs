//! `table#topology`: how the host's GPUs reach each other, like
//! `nvidia-smi topo -m` (link codes, P2P status on hover), and the note that
//! replaces the p2p form on a one-GPU server. Past 8 GPUs the links are
//! counted by kind and the matrix is drawn only when its fold is opened.

use std::collections::BTreeMap;

use leptos::{prelude::*, task::spawn_local};
use shared::topology::{PairTopology, Topology, link_meaning, p2p_meaning};

use crate::hooks::api::get_json;

/// Loads `/api/topology` once; shows nothing where the server could not read it (503).
#[component]
pub fn TopologyMatrix() -> impl IntoView {
    let topology = RwSignal::new(None::<Topology>);
    spawn_local(async move {
        if let Ok(answer) = get_json::<Topology>("/api/topology").await {
            topology.try_set(Some(answer));
        }
    });
    move || {
        let topo = topology.get()?;
        if topo.devices.len() < 2 {
            return Some(
                view! {
                    <p id="p2p-needs-two" class="notice lab-note">
                        "P2P needs two GPUs; this server has one"
                    </p>
                }
                .into_any(),
            );
        }
        let simulated = topo.simulated.then_some(" (simulated)");
        let gpus = topo.devices.len();
        let body = if gpus > FOLD_ABOVE {
            // 64 GPUs are 4,096 cells: counted first, drawn only when asked for.
            let open = RwSignal::new(false);
            let summary =
                topo.link_counts().into_iter().map(|(code, n)| format!("{code} × {n}")).collect::<Vec<_>>().join(" · ");
            view! {
                <p class="topology-summary">
                    {format!("{gpus} GPUs, {} pairs by link: {summary}", gpus * (gpus - 1) / 2)}
                </p>
                <details class="topology-fold" on:toggle=move |ev| {
                    let opened = event_target::<web_sys::HtmlDetailsElement>(&ev).open();
                    open.set(opened);
                }>
                    <summary>{format!("The {gpus} × {gpus} matrix")}</summary>
                    {move || open.get().then(|| matrix(&topo))}
                </details>
            }
            .into_any()
        } else {
            matrix(&topo).into_any()
        };
        Some(
            view! {
                <section class="lab-topology" aria-labelledby="topology-title">
                    <h3 id="topology-title" class="section-title">"Topology" {simulated}</h3>
                    {body}
                    <p class="topology-legend">
                        "NV# NVLinks · PIX one PCIe bridge · PXB several · PHB host bridge · NODE across host bridges · SYS across NUMA nodes. Hover a cell for its P2P status."
                    </p>
                </section>
            }
            .into_any(),
        )
    }
}

/// Above this many GPUs the matrix is folded away behind its link summary until opened.
const FOLD_ABOVE: usize = 8;

/// `table#topology`: one row and one column per GPU, each pair's link code in its cell.
fn matrix(topo: &Topology) -> impl IntoView + use<> {
    let indexes: Vec<u32> = topo.devices.iter().map(|d| d.index).collect();
    // Looked up by pair once: `Topology::pair` searches the list, n² times over n² pairs.
    let pairs: BTreeMap<(u32, u32), &PairTopology> = topo.pairs.iter().map(|p| ((p.a, p.b), p)).collect();
    let header = indexes.iter().map(|i| view! { <th scope="col">{format!("GPU{i}")}</th> }).collect_view();
    let rows = indexes
        .iter()
        .map(|&a| {
            let cells = indexes
                .iter()
                .map(|&b| match pairs.get(&(a, b)) {
                    _ if a == b => view! { <td class="topo-cell topo-self" title="self">"X"</td> }.into_any(),
                    Some(pair) => cell(pair),
                    None => view! { <td class="topo-cell">"?"</td> }.into_any(),
                })
                .collect_view();
            view! {
                <tr data-gpu=a>
                    <th scope="row">{format!("GPU{a}")}</th>
                    {cells}
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="table-scroll">
            <table id="topology" class="topology-table">
                <thead>
                    <tr>
                        <th></th>
                        {header}
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
    }
}

/// One pair's cell: the link code, and its meaning with the P2P statuses as the tooltip.
fn cell(pair: &PairTopology) -> AnyView {
    let title = format!(
        "GPU{} → GPU{}: {} ({})\nP2P read {} ({}), write {} ({}), atomics {}, over NVLink {}",
        pair.a,
        pair.b,
        pair.link,
        link_meaning(&pair.link),
        pair.p2p_read,
        p2p_meaning(&pair.p2p_read),
        pair.p2p_write,
        p2p_meaning(&pair.p2p_write),
        pair.p2p_atomics,
        pair.p2p_nvlink,
    );
    let nvlink = pair.link.starts_with("NV");
    view! {
        <td
            class="topo-cell"
            class:topo-nvlink=nvlink
            data-a=pair.a
            data-b=pair.b
            data-p2p-read=pair.p2p_read.clone()
            data-p2p-write=pair.p2p_write.clone()
            title=title
        >
            {pair.link.clone()}
        </td>
    }
    .into_any()
}
