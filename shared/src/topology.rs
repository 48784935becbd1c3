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

    /// How many pairs of GPUs (each pair once, a < b) each link code joins, most common first, then by
    /// code: the summary a large host shows before its n × n matrix ("NV18 × 2016").
    pub fn link_counts(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for pair in self.pairs.iter().filter(|p| p.a < p.b) {
            match counts.iter_mut().find(|(code, _)| *code == pair.link) {
                Some((_, n)) => *n += 1,
                None => counts.push((pair.link.clone(), 1)),
            }
        }
        crate::order::sort_by(&mut counts, |x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
        counts
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

    #[test]
    fn links_are_counted_once_per_pair_most_common_first() {
        let pair = |a, b, link: &str| PairTopology { a, b, link: link.into(), ..PairTopology::default() };
        let mut pairs = Vec::new();
        for (a, b, link) in [(0, 1, "NV18"), (0, 2, "SYS"), (1, 2, "SYS"), (0, 3, "PIX"), (1, 3, "SYS"), (2, 3, "NV18")]
        {
            pairs.push(pair(a, b, link));
            pairs.push(pair(b, a, link));
        }
        let t = Topology { pairs, ..Topology::default() };
        assert_eq!(t.link_counts(), [("SYS".to_owned(), 3), ("NV18".to_owned(), 2), ("PIX".to_owned(), 1)]);
        assert!(Topology::default().link_counts().is_empty());
    }
}
