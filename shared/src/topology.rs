//! How the GPUs of a host connect to each other (`GET /api/topology`): per
//! pair the link `nvidia-smi topo -m` prints and NVML's peer-to-peer status,
//! per GPU its NVLinks.
//!
//! Codes are nvidia-smi's, so a user can hold the page next to `topo -m`.

use serde::{Deserialize, Serialize};

/// The host's GPU topology, read once at start.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Topology {
    /// True when the simulator made it up.
    pub simulated: bool,
    pub devices: Vec<TopologyDevice>,
    /// Every ordered pair of different GPUs (a, b), a ascending then b.
    pub pairs: Vec<PairTopology>,
}

/// One GPU and its NVLinks.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct TopologyDevice {
    /// NVML index.
    pub index: u32,
    pub name: String,
    pub pci_bus_id: String,
    /// Each NVLink the GPU has; empty without NVLink.
    pub nvlinks: Vec<NvLinkPeer>,
}

/// One NVLink of a GPU and what is at its other end.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct NvLinkPeer {
    pub link: u32,
    pub active: bool,
    /// PCI bus id of the GPU or NVSwitch at the other end, when NVML says.
    pub remote_bus_id: Option<String>,
}

/// How GPU `a` reaches GPU `b`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct PairTopology {
    pub a: u32,
    pub b: u32,
    /// `topo -m`'s code: "NV18" (18 NVLinks, direct or through NVSwitches), else the closest common
    /// PCIe ancestor: "PIX", "PXB", "PHB", "NODE", "SYS"; "?" when NVML cannot tell. See [`link_meaning`].
    pub link: String,
    /// NVLinks joining them (0 without).
    pub nvlinks: u32,
    /// NVML's peer-to-peer status of a reading from, writing to, atomics on b's memory, and of P2P over
    /// NVLink: "OK", "NS", "CNS", "GNS", "TNS", "DR" or "U". See [`p2p_meaning`].
    pub p2p_read: String,
    pub p2p_write: String,
    pub p2p_atomics: String,
    pub p2p_nvlink: String,
}

impl Topology {
    /// The pair (a, b), if both GPUs exist and differ.
    pub fn pair(&self, a: u32, b: u32) -> Option<&PairTopology> {
        self.pairs.iter().find(|p| p.a == a && p.b == b)
    }
}

/// What a link code of [`PairTopology::link`] means (nvidia-smi's legend).
pub fn link_meaning(code: &str) -> &'static str {
    match code {
        "X" => "self",
        "SYS" => "PCIe plus the SMP interconnect between NUMA nodes (e.g. QPI/UPI)",
        "NODE" => "PCIe plus the interconnect between PCIe host bridges within a NUMA node",
        "PHB" => "PCIe plus a PCIe host bridge (typically the CPU)",
        "PXB" => "multiple PCIe bridges, without a PCIe host bridge",
        "PIX" => "at most a single PCIe bridge",
        c if c.starts_with("NV") => "a bonded set of NVLinks (the number says how many)",
        _ => "unknown",
    }
}

/// What a peer-to-peer status code means (nvidia-smi `topo -p2p` legend).
pub fn p2p_meaning(code: &str) -> &'static str {
    match code {
        "OK" => "supported",
        "NS" => "not supported",
        "CNS" => "chipset not supported",
        "GNS" => "GPU not supported",
        "TNS" => "topology not supported",
        "DR" => "disabled by the driver's registry key",
        _ => "unknown",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_found_by_direction_and_codes_explained() {
        let t = Topology {
            pairs: vec![PairTopology { a: 0, b: 1, link: "NV18".into(), nvlinks: 18, ..PairTopology::default() }],
            ..Topology::default()
        };
        assert_eq!(t.pair(0, 1).unwrap().nvlinks, 18);
        assert!(t.pair(1, 0).is_none());
        assert!(link_meaning("NV18").contains("NVLinks"));
        assert_eq!(p2p_meaning("CNS"), "chipset not supported");
        let json = serde_json::to_string(&t).unwrap();
        assert!(json.contains(r#""link":"NV18""#), "{json}");
    }
}
