//! The streams experiment in PyTorch's words, its [`InPyTorch`]: the `torch.cuda`
//! calls that do what it measures, and what a run's figures mean for a PyTorch program.

use shared::lab::{Figure, RunResult};

use super::Streams;
use crate::experiments::pytorch::{InPyTorch, median, times};

impl InPyTorch for Streams {
    const SNIPPET: &'static str = "import torch
copy_stream = torch.cuda.Stream()
with torch.cuda.stream(copy_stream):
    nxt = host_batch.to(\"cuda\", non_blocking=True)  # host_batch pinned
out = model(cur)                                    # computes on the default stream meanwhile
torch.cuda.current_stream().wait_stream(copy_stream)
nxt.record_stream(torch.cuda.current_stream())";

    fn takeaway(result: &RunResult) -> Option<String> {
        line(&result.figures)
    }
}

fn line(figures: &[Figure]) -> Option<String> {
    if let Some(gain) = median(figures, "overlap gain") {
        return Some(if gain >= 1.1 {
            format!(
                "streams overlapped copy and compute: {} faster than one stream; prefetch the next batch on a \
                 torch.cuda.Stream",
                times(gain)
            )
        } else {
            format!("copy and compute did not overlap here ({}): check that the host buffer is pinned", times(gain))
        });
    }
    let gain = median(figures, "concurrent kernels gain")?;
    Some(format!("independent kernels on separate streams ran {} faster than on one stream", times(gain)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::experiments::pytorch::testing::{fig, result, says};

    #[test]
    fn the_snippet_says_it_in_pytorchs_words() {
        says(Streams::SNIPPET, &["torch.cuda.Stream()", "with torch.cuda.stream("]);
    }

    #[test]
    fn streams_say_how_much_overlap_gained() {
        let line = Streams::takeaway(&result(vec![fig("overlap gain", 1.7)], vec![])).unwrap();
        assert!(line.starts_with("streams overlapped copy and compute: 1.70× faster than one stream"), "{line}");
        let none = Streams::takeaway(&result(vec![fig("overlap gain", 1.01)], vec![])).unwrap();
        assert!(none.starts_with("copy and compute did not overlap here (1.01×)"), "{none}");
        let kernels = result(vec![fig("concurrent kernels gain", 7.6)], vec![]);
        assert!(Streams::takeaway(&kernels).unwrap().contains("7.60× faster"));
        assert_eq!(Streams::takeaway(&result(vec![fig("copy alone", 4.8)], vec![])), None);
    }
}
