//! The transfer experiment in PyTorch's words, its [`InPyTorch`]: the `torch.cuda`
//! calls that do what it measures, and what a run's figures mean for a PyTorch program.

use shared::lab::{Figure, RunResult};

use super::Transfer;
use crate::experiments::pytorch::{InPyTorch, times};

impl InPyTorch for Transfer {
    const SNIPPET: &'static str = "import torch
host = torch.randn(64 << 20).pin_memory()           # page-locked: DMA straight from it
dev = host.to(\"cuda\", non_blocking=True)           # async copy, overlaps with compute
loader = torch.utils.data.DataLoader(dataset, batch_size=64, pin_memory=True)
for batch in loader:
    batch = batch.to(\"cuda\", non_blocking=True)";

    fn takeaway(result: &RunResult) -> Option<String> {
        line(&result.figures)
    }
}

/// The figure of `copy` at the largest size measured ("h2d_pinned at 1.00 GiB"), with its size.
fn largest<'a>(figures: &'a [Figure], copy: &str) -> Option<(&'a str, f64)> {
    let prefix = format!("{copy} at ");
    figures.iter().find_map(|f| Some((f.name.strip_prefix(&prefix)?, f.stats.median)))
}

fn line(figures: &[Figure]) -> Option<String> {
    let pair = |way: &str| {
        let (size, pinned) = largest(figures, &format!("{way}_pinned"))?;
        let (other, pageable) = largest(figures, &format!("{way}_pageable"))?;
        (size == other && pinned > 0.0 && pageable > 0.0)
            .then(|| (way.to_uppercase(), size.to_owned(), pinned / pageable))
    };
    let (way, size, ratio) = pair("h2d").or_else(|| pair("d2h"))?;
    Some(if ratio >= 1.2 {
        format!(
            "pinned copies were {} faster than pageable here ({way}, {size}): use DataLoader(pin_memory=True) and \
             .to(device, non_blocking=True)",
            times(ratio)
        )
    } else {
        format!(
            "pinned and pageable copies ran at about the same speed here ({way}, {size}: {}); pinning buys \
             non_blocking copies that overlap compute, not bandwidth, on this host",
            times(ratio)
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::experiments::pytorch::testing::{fig, result, says};

    #[test]
    fn the_snippet_says_it_in_pytorchs_words() {
        says(Transfer::SNIPPET, &["pin_memory=True", "non_blocking=True"]);
    }

    #[test]
    fn transfer_compares_pinned_and_pageable_at_the_same_size() {
        let figures = vec![fig("h2d_pageable at 1.00 GiB", 7.0), fig("h2d_pinned at 1.00 GiB", 47.6)];
        let line = Transfer::takeaway(&result(figures, vec![])).unwrap();
        assert!(line.starts_with("pinned copies were 6.80× faster than pageable here (H2D, 1.00 GiB)"), "{line}");
        assert!(line.contains("DataLoader(pin_memory=True)"), "{line}");
        let same = vec![fig("d2h_pageable at 64.0 MiB", 50.0), fig("d2h_pinned at 64.0 MiB", 52.0)];
        let line = Transfer::takeaway(&result(same, vec![])).unwrap();
        assert!(line.contains("about the same speed here (D2H, 64.0 MiB: 1.04×)"), "{line}");
        let only_pinned = vec![fig("h2d_pinned at 1.00 GiB", 47.6), fig("d2d at 1.00 GiB", 4000.0)];
        assert_eq!(Transfer::takeaway(&result(only_pinned, vec![])), None);
        let sizes_differ = vec![fig("h2d_pageable at 4.00 KiB", 1.0), fig("h2d_pinned at 1.00 GiB", 47.6)];
        assert_eq!(Transfer::takeaway(&result(sizes_differ, vec![])), None);
    }
}
