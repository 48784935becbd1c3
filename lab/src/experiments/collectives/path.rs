//! The peak of the path a collective's data crosses, drawn as the busbw chart's reference line: NVLink
//! (links × each link's rate, one direction) when every pair of the run's GPUs is joined by NVLink in
//! NVML's topology, else PCIe (the slowest GPU's maximum link, one direction). nccl-tests' busbw is
//! comparable with a link's one-way rate (half the "900 GB/s" NVIDIA quotes for NVLink 4 both ways), so
//! that is the line. Its label names the link and its source; the chart writes the value after it.

use shared::topology::Topology;

/// The reference line of a run over several GPUs: its label, e.g. "NVLink 4 × 18 links (NVML topology),
/// one-way peak", and GB/s one direction.
#[derive(Debug, Clone, PartialEq)]
pub struct PathPeak {
    pub label: String,
    pub gbs: f64,
}

/// NVLink's generation and one link's rate, GB/s one direction, from a GPU's name: 25 GB/s a link for
/// NVLink 2 to 4 (V100 6 links = 150, A100 12 = 300, H100/H200 18 = 450 GB/s one way), 50 for NVLink 5
/// (B200 18 = 900). NVML's topology counts links but does not say their generation.
pub fn nvlink_of(name: &str) -> (&'static str, f64) {
    let name = name.to_ascii_uppercase();
    let has = |models: &[&str]| models.iter().any(|m| name.contains(m));
    if has(&["B100", "B200", "B300"]) {
        ("NVLink 5", 50.0)
    } else if has(&["H100", "H200", "H800", "H20", "GH200"]) {
        ("NVLink 4", 25.0)
    } else if has(&["A100", "A800"]) {
        ("NVLink 3", 25.0)
    } else if has(&["V100"]) {
        ("NVLink 2", 25.0)
    } else {
        ("NVLink", 25.0)
    }
}

/// An NVLink line of `links` links on GPUs named `name`.
pub fn nvlink(name: &str, links: u32, source: &str) -> PathPeak {
    let (generation, per_link) = nvlink_of(name);
    let gbs = f64::from(links) * per_link;
    PathPeak { label: format!("{generation} × {links} links ({source}), one-way peak"), gbs }
}

/// The path's peak for a run over `gpus`: `None` on one GPU (nothing crosses a link) or where neither the
/// topology nor `pcie` (e.g. "PCIe Gen5 x16" and its GB/s one way) can say.
pub fn path_peak(
    gpus: &[u32],
    topology: Option<&Topology>,
    pcie: Option<(String, f64)>,
    simulated: bool,
) -> Option<PathPeak> {
    if gpus.len() < 2 {
        return None;
    }
    let source = if simulated { "simulated topology" } else { "NVML topology" };
    if let Some(t) = topology {
        let pairs: Vec<u32> = gpus
            .iter()
            .enumerate()
            .flat_map(|(i, &a)| gpus[i + 1..].iter().map(move |&b| (a, b)))
            .map(|(a, b)| t.pair(a, b).map_or(0, |p| p.nvlinks))
            .collect();
        let fewest = pairs.iter().copied().min().unwrap_or(0);
        if fewest > 0 {
            let name = t.devices.iter().find(|d| d.index == gpus[0]).map_or("", |d| d.name.as_str());
            return Some(nvlink(name, fewest, source));
        }
    }
    let (name, gbs) = pcie?;
    let source = if simulated { "simulated" } else { "NVML maximum link" };
    Some(PathPeak { label: format!("{name} ({source}), one-way peak"), gbs })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use shared::topology::{PairTopology, TopologyDevice};

    fn topology(names: &[&str], links: impl Fn(u32, u32) -> u32) -> Topology {
        let n = names.len() as u32;
        let devices = (0..n)
            .map(|i| TopologyDevice { index: i, name: names[i as usize].into(), ..TopologyDevice::default() })
            .collect();
        let pairs = (0..n)
            .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| (a, b)))
            .map(|(a, b)| PairTopology { a, b, nvlinks: links(a, b), ..PairTopology::default() })
            .collect();
        Topology { simulated: false, devices, pairs }
    }

    #[test]
    fn nvlinked_gpus_get_the_links_peak_and_others_pcie() {
        let pcie = || Some(("PCIe Gen5 x16".to_owned(), 63.0));
        let h200 = topology(&["NVIDIA H200"; 4], |_, _| 18);
        let peak = path_peak(&[0, 1, 2], Some(&h200), pcie(), false).unwrap();
        assert_eq!(peak.gbs, 450.0);
        assert_eq!(peak.label, "NVLink 4 × 18 links (NVML topology), one-way peak");
        // One pair without NVLink: the ring crosses PCIe.
        let mixed = topology(&["NVIDIA H200"; 3], |a, b| if a == 2 || b == 2 { 0 } else { 18 });
        let peak = path_peak(&[0, 1, 2], Some(&mixed), pcie(), false).unwrap();
        assert_eq!((peak.gbs, peak.label.as_str()), (63.0, "PCIe Gen5 x16 (NVML maximum link), one-way peak"));
        assert_eq!(path_peak(&[0, 1], Some(&mixed), pcie(), true).unwrap().gbs, 450.0);
        assert!(path_peak(&[0, 1], Some(&h200), pcie(), true).unwrap().label.contains("(simulated topology)"));
        // One GPU: no path; nothing known: no line.
        assert_eq!(path_peak(&[0], Some(&h200), pcie(), false), None);
        assert_eq!(path_peak(&[0, 1], None, None, false), None);
        assert_eq!(nvlink_of("NVIDIA B200"), ("NVLink 5", 50.0));
        assert_eq!(nvlink_of("NVIDIA A100-SXM4-80GB").0, "NVLink 3");
    }
}
