//! The memory experiment in PyTorch's words, its [`InPyTorch`]: the `torch.cuda`
//! calls that do what it measures, and what a run's figures mean for a PyTorch program.

use shared::lab::{Figure, MemoryStep, RunResult};
use shared::units::{format_bytes, three_digits};

use super::Memory;
use crate::experiments::pytorch::{InPyTorch, median};

impl InPyTorch for Memory {
    const SNIPPET: &'static str = "import torch
x = [torch.empty(256 << 20, dtype=torch.uint8, device=\"cuda\") for _ in range(8)]
print(torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
del x[::2]                      # freed blocks stay reserved by the caching allocator
print(torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
x.clear()
torch.cuda.empty_cache()        # hands this process's cached blocks back to the driver
print(torch.cuda.memory_reserved())";

    fn takeaway(result: &RunResult) -> Option<String> {
        line(&result.memory_steps, &result.figures)
    }
}

fn line(steps: &[MemoryStep], figures: &[Figure]) -> Option<String> {
    let at = |label: &str| steps.iter().position(|s| s.label == label);
    let trimmed = at("empty_cache").filter(|&i| i > 0)?;
    let released = steps[trimmed - 1].reserved.checked_sub(steps[trimmed].reserved)?;
    let kept = steps.iter().map(|s| s.reserved.saturating_sub(s.allocated)).max().unwrap_or(0);
    let mut line = if released > 0 {
        format!("empty_cache() returned {} to the driver; other processes can use it now", format_bytes(released))
    } else if kept == 0 {
        "freed blocks went straight back to the driver (nothing stayed cached), so empty_cache() had nothing to \
         return"
            .to_owned()
    } else {
        return None;
    };
    let pooled = median(figures, "allocation served from the pool");
    if let Some((pooled, fresh)) = pooled.zip(median(figures, "fresh allocation from the driver")) {
        let ratio = three_digits(fresh / pooled);
        line.push_str(&format!(", but the next allocation costs {ratio}× more than one served from the cache"));
    }
    Some(line)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::experiments::pytorch::testing::{fig, result, says, step};

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_snippet_says_it_in_pytorchs_words() {
        says(Memory::SNIPPET, &["torch.cuda.memory_allocated()", "memory_reserved()", "empty_cache()"]);
    }

    #[test]
    fn memory_says_what_empty_cache_returned_and_what_a_fresh_allocation_costs() {
        let steps = vec![
            step("start", 0, 0),
            step("alloc block 1", GIB, GIB),
            step("alloc block 2", 2 * GIB, 2 * GIB),
            step("free 1 blocks", GIB, 2 * GIB),
            step("free all", 0, 2 * GIB),
            step("empty_cache", 0, 0),
        ];
        let figures = vec![fig("allocation served from the pool", 3.0), fig("fresh allocation from the driver", 78.0)];
        let line = Memory::takeaway(&result(figures, steps.clone())).unwrap();
        assert_eq!(
            line,
            "empty_cache() returned 2.00 GiB to the driver; other processes can use it now, but the next allocation \
             costs 26.0× more than one served from the cache"
        );
        let line = Memory::takeaway(&result(vec![], steps)).unwrap();
        assert!(line.ends_with("can use it now"), "{line}");
        // A pool that caches nothing (the faulty one) has nothing to return, and says so.
        let uncached = vec![
            step("start", 0, 0),
            step("alloc block 1", GIB, GIB),
            step("free all", 0, 0),
            step("empty_cache", 0, 0),
        ];
        assert!(Memory::takeaway(&result(vec![], uncached)).unwrap().contains("nothing to return"));
        assert_eq!(Memory::takeaway(&result(vec![], vec![])), None, "no steps, no line");
    }
}
