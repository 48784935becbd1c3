//! The collectives experiment in PyTorch's words, its [`InPyTorch`]: the `torch.cuda`
//! calls that do what it measures, and what a run's figures mean for a PyTorch program.

use shared::lab::{Figure, RunResult};
use shared::units::three_digits;

use super::Collectives;
use crate::experiments::pytorch::InPyTorch;

impl InPyTorch for Collectives {
    const SNIPPET: &'static str = "import torch, torch.distributed as dist        # torchrun --nproc-per-node=N this.py
dist.init_process_group(\"nccl\")
torch.cuda.set_device(dist.get_rank())
x = torch.full((64 << 20,), dist.get_rank() + 1.0, device=\"cuda\")
dist.all_reduce(x)                                  # sum over ranks; also all_gather_into_tensor, reduce_scatter_tensor, broadcast
model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
with model.no_sync():                               # accumulation steps: no gradient all-reduce
    loss.backward()";

    fn takeaway(result: &RunResult) -> Option<String> {
        line(&result.figures)
    }
}

/// The DDP step's share of communication, or the largest all_reduce's busbw.
fn line(figures: &[Figure]) -> Option<String> {
    let share = figures.iter().find(|f| f.name.starts_with("DDP step: communication's share")).map(|f| f.stats.median);
    if let Some(share) = share {
        return Some(format!(
            "{}% of a DDP step waited on the gradient all-reduce beyond the backward pass; a larger bucket_cap_mb \
             or no_sync() on accumulation steps cuts it",
            three_digits(share)
        ));
    }
    let busbw = figures
        .iter()
        .rfind(|f| f.name.starts_with("all_reduce ") && f.name.ends_with(" busbw") && f.stats.median > 0.0)?;
    Some(format!(
        "dist.all_reduce reached {} GB/s busbw ({}); compare it with the link's peak to see what DDP's gradient \
         sync costs",
        three_digits(busbw.stats.median),
        busbw.name.trim_end_matches(" busbw")
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::experiments::pytorch::testing::{fig, result, says};

    #[test]
    fn the_snippet_says_it_in_pytorchs_words() {
        says(Collectives::SNIPPET, &["dist.all_reduce(x)", "bucket_cap_mb=25", "no_sync()"]);
    }

    #[test]
    fn the_ddp_share_comes_first_then_the_largest_all_reduce() {
        let ddp =
            vec![fig("all_reduce 256 MiB busbw", 350.0), fig("DDP step: communication's share of the step", 12.5)];
        let line = Collectives::takeaway(&result(ddp, vec![])).unwrap();
        assert!(line.starts_with("12.5% of a DDP step waited on the gradient all-reduce"), "{line}");
        let sweep = vec![
            fig("all_reduce 1.00 MiB busbw", 40.0),
            fig("all_gather 1.00 GiB busbw", 300.0),
            fig("all_reduce 1.00 GiB busbw", 360.0),
        ];
        let line = Collectives::takeaway(&result(sweep, vec![])).unwrap();
        assert!(line.starts_with("dist.all_reduce reached 360 GB/s busbw (all_reduce 1.00 GiB)"), "{line}");
        assert_eq!(Collectives::takeaway(&result(vec![fig("all_gather 1.00 GiB busbw", 300.0)], vec![])), None);
        assert_eq!(Collectives::takeaway(&result(vec![fig("all_reduce 1.00 GiB busbw", 0.0)], vec![])), None);
    }
}
