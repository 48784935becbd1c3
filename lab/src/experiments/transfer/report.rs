//! The transfer sweep's timings turned into curves, efficiencies against the link's peaks, and notes.

use shared::lab::{ChartSpec, Point, ReferenceLine, RunResult, Series, Stats};
use crate::experiments::transfer::params::CopyKind;
use shared::units::format_bytes;

use crate::guards::LinkPeaks;
use crate::report::{empty, figure};
use crate::stats::rates;

/// A note every transfer result carries: why pageable figures can be trusted.
pub const WRITTEN_BUFFERS_NOTE: &str = "Host buffers are written before they are timed: copying from never-written \
     memory reads the kernel's zero page and flatters pageable H2D about 3×.";

/// One timed copy size of the transfer sweep.
#[derive(Debug, Clone)]
pub struct TransferSample {
    pub copy: CopyKind,
    pub bytes: u64,
    pub times_ms: Vec<f64>,
}

pub fn transfer(samples: &[TransferSample], peaks: &LinkPeaks) -> RunResult {
    let mut r = empty(
        ChartSpec::Lines { x_label: "bytes per copy".into(), y_label: "GB/s".into(), log_x: true, log_y: true },
        "GB/s",
    );
    for copy in CopyKind::ALL {
        let points: Vec<Point> = samples
            .iter()
            .filter(|s| s.copy == copy)
            .filter_map(|s| Some(Point { x: s.bytes as f64, y: rates(moved(copy, s.bytes), &s.times_ms, 1e-9)? }))
            .collect();
        if points.is_empty() {
            continue;
        }
        if let Some(largest) = points.iter().max_by(|a, b| a.x.total_cmp(&b.x)) {
            let peak = if copy.on_device() { peaks.hbm } else { peaks.pcie };
            let name = format!("{} at {}", copy.name(), format_bytes(largest.x as u64));
            r.figures.extend(figure(&name, "GB/s", Some(largest.y)));
            if let Some(peak) = peak {
                let pct = |v: f64| v / (peak / 1e9) * 100.0;
                let y = largest.y;
                let stats = Stats { median: pct(y.median), min: pct(y.min), max: pct(y.max), n: y.n };
                r.figures.extend(figure(&format!("{} efficiency", copy.name()), "%", Some(stats)));
            }
        }
        r.series.push(Series { name: copy.name().to_owned(), points });
    }
    if let Some(pcie) = peaks.pcie {
        let label = peaks.pcie_label.clone().unwrap_or_else(|| "PCIe".into());
        r.references.push(ReferenceLine { name: format!("{label} peak"), value: pcie / 1e9 });
    }
    if let Some(hbm) = peaks.hbm {
        r.references.push(ReferenceLine { name: "HBM peak (bus width × memory clock)".into(), value: hbm / 1e9 });
    }
    r.notes.push(WRITTEN_BUFFERS_NOTE.into());
    r.notes.push(
        "d2d and d2d_kernel count bytes read plus bytes written; times are CUDA events around each copy. Pinned \
         and device copies are queued behind a short spin kernel, so the host's cost of submitting them is \
         outside the window, and those under 64 MiB are timed as a batch of back-to-back copies moving 64 MiB \
         (at most 64), the window divided by their number (as nvbandwidth times copies); pageable copies are \
         staged by the host inside the call, so they go one by one."
            .into(),
    );
    if samples.iter().any(|s| s.copy.on_device()) {
        r.notes.push(
            "d2d is the driver's copy (cuMemcpyDtoDAsync), the call PyTorch's contiguous copy_ makes; d2d_kernel \
             is a copy kernel on the SMs (one 16-byte load and store per thread over the whole buffer)."
                .into(),
        );
    }
    r
}

/// Records the GPU's L2 size on a transfer result, for the chart's mark and a note; `source` says where
/// the size comes from ("the CUDA device attribute", or "simulated: an H200's").
pub fn mark_l2(r: &mut RunResult, l2_bytes: u64, source: &str) {
    if l2_bytes == 0 {
        return;
    }
    r.l2_bytes = Some(l2_bytes);
    let size = format_bytes(l2_bytes);
    r.notes.push(format!(
        "L2 is {size} ({source}): a device copy of up to half that has its source and destination in it, so \
         d2d and d2d_kernel figures there can exceed HBM bandwidth; the chart shades those sizes."
    ));
}

/// Bytes a copy moves through memory: device-to-device reads and writes each byte.
fn moved(copy: CopyKind, bytes: u64) -> f64 {
    if copy.on_device() { 2.0 * bytes as f64 } else { bytes as f64 }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn transfer_has_curves_references_and_efficiency() {
        let samples = vec![
            TransferSample { copy: CopyKind::H2dPinned, bytes: 1 << 30, times_ms: vec![20.0, 21.0, 19.5] },
            TransferSample { copy: CopyKind::D2d, bytes: 1 << 30, times_ms: vec![0.5, 0.6, 0.5] },
        ];
        let peaks = LinkPeaks { pcie: Some(63e9), pcie_label: Some("PCIe Gen5 x16".into()), hbm: Some(4.8e12) };
        let r = transfer(&samples, &peaks);
        assert_eq!(r.series.len(), 2);
        assert_eq!(r.references.len(), 2);
        let eff = r.figures.iter().find(|f| f.name == "h2d_pinned efficiency").unwrap();
        // 1 GiB in 20 ms = 53.7 GB/s = 85% of 63 GB/s.
        assert!((eff.stats.median - 85.2).abs() < 0.5, "{eff:?}");
        let d2d = r.figures.iter().find(|f| f.name.starts_with("d2d at")).unwrap();
        assert!((d2d.stats.median - 4295.0).abs() < 1.0, "read + write bytes: {d2d:?}");
        assert!(r.notes[0].contains("written"));
    }

    #[test]
    fn the_sm_copy_counts_like_the_copy_engine_and_l2_is_marked() {
        let samples = vec![
            TransferSample { copy: CopyKind::D2d, bytes: 16 << 20, times_ms: vec![0.011] },
            TransferSample { copy: CopyKind::D2dKernel, bytes: 16 << 20, times_ms: vec![0.0075] },
        ];
        let peaks = LinkPeaks { pcie: None, pcie_label: None, hbm: Some(4.8e12) };
        let mut r = transfer(&samples, &peaks);
        let names: Vec<&str> = r.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["d2d", "d2d_kernel"]);
        let kernel = r.figures.iter().find(|f| f.name == "d2d_kernel at 16.0 MiB").unwrap();
        // 2 × 16 MiB in 7.5 µs: read + write bytes, like d2d.
        assert!((kernel.stats.median - 4473.9).abs() < 1.0, "{kernel:?}");
        let efficiency = r.figures.iter().find(|f| f.name == "d2d_kernel efficiency").unwrap();
        assert!(efficiency.stats.median > 90.0, "against the HBM peak: {efficiency:?}");
        assert!(r.notes.iter().any(|n| n.contains("cuMemcpyDtoDAsync") && n.contains("SM")), "{:?}", r.notes);
        assert_eq!(r.l2_bytes, None);
        mark_l2(&mut r, 50 << 20, "the CUDA device attribute");
        assert_eq!(r.l2_bytes, Some(50 << 20));
        let note = r.notes.last().unwrap();
        assert!(note.contains("50.0 MiB") && note.contains("exceed HBM bandwidth"), "{note}");
        let mut none = transfer(&samples, &peaks);
        mark_l2(&mut none, 0, "a driver that reports no L2");
        assert_eq!((none.l2_bytes, none.notes.len()), (None, r.notes.len() - 1));
    }
}
