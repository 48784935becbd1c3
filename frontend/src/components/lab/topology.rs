//! `table#topology`: how the host's GPUs reach each other, like
//! `nvidia-smi topo -m` (link codes, P2P status on hover), and the note that
//! replaces the p2p form on a one-GPU server.

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
        let indexes: Vec<u32> = topo.devices.iter().map(|d| d.index).collect();
        let header = indexes.iter().map(|i| view! { <th scope="col">{format!("GPU{i}")}</th> }).collect_view();
        let rows = indexes
            .iter()
            .map(|&a| {
                let cells = indexes
                    .iter()
                    .map(|&b| match topo.pair(a, b) {
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
        let simulated = topo.simulated.then_some(" (simulated)");
        Some(
            view! {
                <section class="lab-topology" aria-labelledby="topology-title">
                    <h3 id="topology-title" class="section-title">"Topology" {simulated}</h3>
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
                    <p class="topology-legend">
                        "NV# NVLinks · PIX one PCIe bridge · PXB several · PHB host bridge · NODE across host bridges · SYS across NUMA nodes. Hover a cell for its P2P status."
                    </p>
                </section>
            }
            .into_any(),
        )
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
