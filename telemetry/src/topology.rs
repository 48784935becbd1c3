//! How the GPUs connect, the way `nvidia-smi topo -m` and `topo -p2p` show it:
//! read from NVML once at start (blocking), or made up by the simulator.
//!
//! The link code of a pair is "NV<n>" when NVLinks join the two GPUs, else
//! the closest common PCIe ancestor. NVLinks count as joining a pair when a
//! link of one ends at the other's PCI bus id, or, on NVSwitch systems (links
//! end at a switch, or NVML cannot say where), when NVML reports P2P over
//! NVLink as supported for the pair: then, as `topo -m` does, the pair gets
//! the smaller of the two GPUs' link counts.

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{P2pCapabilitiesIndex, P2pStatus, TopologyLevel};
use shared::DeviceInfo;
use shared::topology::{NvLinkPeer, PairTopology, Topology, TopologyDevice};

/// Most NVLinks a GPU has (NVML_NVLINK_MAX_LINKS).
const MAX_LINKS: u32 = 18;

/// nvidia-smi's code for a peer-to-peer status.
pub fn p2p_code(status: &P2pStatus) -> &'static str {
    match status {
        P2pStatus::Ok => "OK",
        P2pStatus::ChipsetNotSupported => "CNS",
        P2pStatus::GpuNotSupported => "GNS",
        P2pStatus::IohTopologyNotSupported => "TNS",
        P2pStatus::DisabledByRegkey => "DR",
        P2pStatus::NotSupported => "NS",
        P2pStatus::Unknown => "U",
    }
}

/// `topo -m`'s code for the closest common PCIe ancestor.
pub fn ancestor_code(level: &TopologyLevel) -> &'static str {
    match level {
        TopologyLevel::Internal | TopologyLevel::Single => "PIX",
        TopologyLevel::Multiple => "PXB",
        TopologyLevel::HostBridge => "PHB",
        TopologyLevel::Node => "NODE",
        TopologyLevel::System => "SYS",
    }
}

/// "00000000:07:00.0" and "0000:07:00.0" name the same bus: compare domain numerically, the rest as text.
fn same_bus(a: &str, b: &str) -> bool {
    let split = |s: &str| {
        let (domain, rest) = s.split_once(':')?;
        Some((u32::from_str_radix(domain, 16).ok()?, rest.to_ascii_lowercase()))
    };
    match (split(a), split(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a.eq_ignore_ascii_case(b),
    }
}

/// The NVLink count and link code of a pair, from each GPU's links and NVML's P2P-over-NVLink status.
pub fn link_of(a: &TopologyDevice, b: &TopologyDevice, p2p_nvlink: &str, ancestor: Option<&str>) -> (u32, String) {
    fn active(d: &TopologyDevice) -> impl Iterator<Item = &NvLinkPeer> {
        d.nvlinks.iter().filter(|l| l.active)
    }
    let direct = active(a).filter(|l| l.remote_bus_id.as_deref().is_some_and(|r| same_bus(r, &b.pci_bus_id))).count();
    let fabric = |d: &TopologyDevice, gpus: [&TopologyDevice; 2]| {
        active(d)
            .filter(|l| !l.remote_bus_id.as_deref().is_some_and(|r| gpus.iter().any(|g| same_bus(r, &g.pci_bus_id))))
            .count()
    };
    let nvlinks = if direct > 0 {
        direct
    } else if p2p_nvlink == "OK" {
        fabric(a, [a, b]).min(fabric(b, [a, b]))
    } else {
        0
    };
    let nvlinks = u32::try_from(nvlinks).unwrap_or(0);
    let code = if nvlinks > 0 { format!("NV{nvlinks}") } else { ancestor.unwrap_or("?").to_owned() };
    (nvlinks, code)
}

/// Reads the topology of `devices` from NVML. Blocking (a few NVML calls per GPU and pair).
pub fn read(nvml: &Nvml, devices: &[DeviceInfo]) -> Topology {
    let mut topology = Topology { simulated: false, ..Topology::default() };
    for info in devices {
        let mut device = TopologyDevice {
            index: info.index,
            name: info.name.clone(),
            pci_bus_id: info.pci_bus_id.clone(),
            nvlinks: Vec::new(),
        };
        if let Ok(handle) = nvml.device_by_index(info.index) {
            let links = if info.nvlink_links > 0 { info.nvlink_links } else { MAX_LINKS };
            for link in 0..links {
                let wrapper = handle.link_wrapper_for(link);
                // Without NVLink (or past the last link) NVML answers NotSupported / InvalidArg.
                let Ok(active) = wrapper.is_active() else { continue };
                let remote_bus_id = if active { wrapper.remote_pci_info().ok().map(|p| p.bus_id) } else { None };
                device.nvlinks.push(NvLinkPeer { link, active, remote_bus_id });
            }
        }
        topology.devices.push(device);
    }
    for a in &topology.devices {
        for b in topology.devices.iter().filter(|b| b.index != a.index) {
            let (Ok(da), Ok(db)) = (nvml.device_by_index(a.index), nvml.device_by_index(b.index)) else {
                continue;
            };
            let status = |index| da.p2p_status(&db, index).map_or("U", |s| p2p_code(&s)).to_owned();
            let p2p_nvlink = status(P2pCapabilitiesIndex::NvLink);
            let (p2p_read, p2p_write, p2p_atomics) = (
                status(P2pCapabilitiesIndex::Read),
                status(P2pCapabilitiesIndex::Write),
                status(P2pCapabilitiesIndex::Atomics),
            );
            let ancestor = da.topology_common_ancestor(db).ok().map(|l| ancestor_code(&l));
            let (nvlinks, link) = link_of(a, b, &p2p_nvlink, ancestor);
            topology.pairs.push(PairTopology {
                a: a.index,
                b: b.index,
                link,
                nvlinks,
                p2p_read,
                p2p_write,
                p2p_atomics,
                p2p_nvlink,
            });
        }
    }
    topology
}

/// A plausible topology for simulated GPUs: GPUs of one NVLink-capable model form an NVSwitch mesh
/// ("NV18" for H200s); other pairs meet over PCIe ("NODE" within a group of four, "SYS" across).
pub fn simulated(devices: &[DeviceInfo]) -> Topology {
    let devices: Vec<(TopologyDevice, &DeviceInfo)> = devices
        .iter()
        .map(|info| {
            let nvlinks = (0..info.nvlink_links)
                .map(|link| NvLinkPeer { link, active: true, remote_bus_id: Some("00000000:F0:00.0".into()) })
                .collect();
            let device = TopologyDevice {
                index: info.index,
                name: info.name.clone(),
                pci_bus_id: info.pci_bus_id.clone(),
                nvlinks,
            };
            (device, info)
        })
        .collect();
    let mut pairs = Vec::new();
    for (a, ia) in &devices {
        for (b, ib) in devices.iter().filter(|(b, _)| b.index != a.index) {
            let nvlink = ia.name == ib.name && ia.nvlink_links > 0;
            let ok = |yes: bool| if yes { "OK" } else { "NS" }.to_owned();
            let ancestor = if a.index / 4 == b.index / 4 { "NODE" } else { "SYS" };
            let (nvlinks, link) = link_of(a, b, &ok(nvlink), Some(ancestor));
            pairs.push(PairTopology {
                a: a.index,
                b: b.index,
                link,
                nvlinks,
                p2p_read: ok(nvlink),
                p2p_write: ok(nvlink),
                p2p_atomics: ok(nvlink),
                p2p_nvlink: ok(nvlink),
            });
        }
    }
    Topology { simulated: true, devices: devices.into_iter().map(|(d, _)| d).collect(), pairs }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn gpu(index: u32, bus: &str, links: &[(bool, Option<&str>)]) -> TopologyDevice {
        TopologyDevice {
            index,
            name: "NVIDIA H200".into(),
            pci_bus_id: bus.into(),
            nvlinks: (0..)
                .zip(links)
                .map(|(link, (active, remote))| NvLinkPeer {
                    link,
                    active: *active,
                    remote_bus_id: remote.map(str::to_owned),
                })
                .collect(),
        }
    }

    #[test]
    fn direct_links_count_to_the_peer_bus() {
        let a =
            gpu(0, "00000000:06:00.0", &[(true, Some("0000:07:00.0")), (true, Some("0000:07:00.0")), (false, None)]);
        let b = gpu(1, "00000000:07:00.0", &[(true, Some("0000:06:00.0")), (true, Some("0000:06:00.0"))]);
        assert_eq!(link_of(&a, &b, "NS", Some("SYS")), (2, "NV2".to_owned()));
    }

    #[test]
    fn nvswitch_links_count_when_nvml_says_p2p_over_nvlink_works() {
        let switch = [(true, Some("00000000:F0:00.0")); 18];
        let a = gpu(0, "00000000:06:00.0", &switch);
        let b = gpu(1, "00000000:07:00.0", &switch);
        assert_eq!(link_of(&a, &b, "OK", Some("PHB")), (18, "NV18".to_owned()));
        assert_eq!(link_of(&a, &b, "NS", Some("PHB")), (0, "PHB".to_owned()));
        let unknown_remote = gpu(1, "00000000:07:00.0", &[(true, None); 18]);
        assert_eq!(link_of(&a, &unknown_remote, "OK", None).1, "NV18");
    }

    #[test]
    fn simulated_h200s_form_an_nv18_mesh() {
        let devices: Vec<DeviceInfo> = (0..3)
            .map(|index| DeviceInfo {
                index,
                name: if index == 2 { "NVIDIA L40S (simulated)" } else { "NVIDIA H200 (simulated)" }.into(),
                pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
                nvlink_links: if index == 2 { 0 } else { 18 },
                uuid: String::new(),
                compute_capability: None,
                memory_total: 0,
                simulated: true,
                max_clocks: shared::Clocks::default(),
                pcie_max: None,
                memory_bus_width: None,
                slowdown_temp_c: None,
                shutdown_temp_c: None,
            })
            .collect();
        let t = simulated(&devices);
        assert!(t.simulated);
        assert_eq!(t.pairs.len(), 6);
        let h200s = t.pair(0, 1).unwrap();
        assert_eq!((h200s.link.as_str(), h200s.p2p_read.as_str()), ("NV18", "OK"));
        let mixed = t.pair(2, 0).unwrap();
        assert_eq!((mixed.link.as_str(), mixed.p2p_nvlink.as_str()), ("NODE", "NS"));
    }
}
