//! The to_device experiment in PyTorch's words.

use shared::lab::RunResult;
use shared::units::three_digits;

use super::{PAGEABLE, PINNED, ToDevice};
use crate::experiments::pytorch::{InPyTorch, median, times};

impl InPyTorch for ToDevice {
    const SNIPPET: &'static str = "import torch
t = torch.randn(64 * 2**20)                 # 256 MiB in ordinary (pageable) host memory
x = t.to('cuda')                            # the driver stages it through a pinned buffer
p = t.pin_memory()                          # page-locked: the copy engine reads it directly
y = p.to('cuda', non_blocking=True)         # returns at once; the copy overlaps host work
torch.cuda.synchronize()";

    fn takeaway(result: &RunResult) -> Option<String> {
        let pageable = median(&result.figures, PAGEABLE)?;
        let pinned = median(&result.figures, PINNED)?;
        Some(format!(
            "the tensor reached the GPU in {} ms from pageable memory and {} ms from pinned memory ({} faster): \
             give the DataLoader pin_memory=True and copy batches with .to('cuda', non_blocking=True)",
            three_digits(pageable),
            three_digits(pinned),
            times(pageable / pinned)
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::experiments::pytorch::testing::{fig, result, says};

    #[test]
    fn the_snippet_says_it_in_pytorchs_words() {
        says(ToDevice::SNIPPET, &["t.to('cuda')", "pin_memory()", "non_blocking=True"]);
    }

    #[test]
    fn the_takeaway_compares_the_two_copies() {
        let line = ToDevice::takeaway(&result(vec![fig(PAGEABLE, 38.0), fig(PINNED, 5.0)], vec![])).unwrap();
        assert!(line.starts_with("the tensor reached the GPU in 38.0 ms from pageable memory and 5.00 ms"), "{line}");
        assert!(line.contains("(7.60× faster)") && line.contains("pin_memory=True"), "{line}");
        assert_eq!(ToDevice::takeaway(&result(vec![fig(PAGEABLE, 38.0)], vec![])), None);
    }
}
