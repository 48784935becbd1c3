//! The p2p experiment in PyTorch's words, its [`InPyTorch`]: the `torch.cuda`
//! calls that do what it measures, and what a run's figures mean for a PyTorch program.

use shared::lab::{Figure, RunResult};
use shared::units::three_digits;

use super::P2p;
use crate::experiments::pytorch::{InPyTorch, median, times};

impl InPyTorch for P2p {
    const SNIPPET: &'static str = "import torch
print(torch.cuda.can_device_access_peer(0, 1))      # direct GPU-to-GPU access?
x = torch.randn(64 << 20, device=\"cuda:0\")
y = x.to(\"cuda:1\", non_blocking=True)              # peer copy, or staged through the host
torch.cuda.synchronize(\"cuda:1\")";

    fn takeaway(result: &RunResult) -> Option<String> {
        line(&result.figures)
    }
}

fn line(figures: &[Figure]) -> Option<String> {
    const ENABLED: &str = " unidirectional, peer access enabled";
    const DISABLED: &str = " unidirectional, peer access disabled";
    let mut best: Option<(String, f64, f64)> = None;
    let mut staged: Vec<f64> = Vec::new();
    for f in figures {
        if let Some(pair) = f.name.strip_suffix(DISABLED) {
            staged.push(f.stats.median);
            let peer = median(figures, &format!("{pair}{ENABLED}"));
            if let Some(peer) = peer.filter(|_| f.stats.median > 0.0)
                && best.as_ref().is_none_or(|(_, p, _)| peer > *p)
            {
                best = Some((pair.to_owned(), peer, f.stats.median));
            }
        }
    }
    if let Some((pair, peer, host)) = best {
        return Some(format!(
            "peer access made copies {} faster than staging through the host ({pair}: {} vs {} GB/s); tensor.to(\"cuda:N\") \
             uses it when torch.cuda.can_device_access_peer says yes",
            times(peer / host),
            three_digits(peer),
            three_digits(host)
        ));
    }
    let fastest = staged.into_iter().filter(|v| *v > 0.0).reduce(f64::max)?;
    Some(format!(
        "no pair here has peer access: every GPU-to-GPU copy goes through host memory (at most {} GB/s), so keep \
         tensors that work together on one GPU",
        three_digits(fastest)
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::experiments::pytorch::testing::{fig, result, says};

    #[test]
    fn the_snippet_says_it_in_pytorchs_words() {
        says(P2p::SNIPPET, &["to(\"cuda:1\"", "torch.cuda.can_device_access_peer"]);
    }

    #[test]
    fn p2p_compares_peer_access_with_the_host_and_says_when_there_is_none() {
        let figures = vec![
            fig("GPU 0→1 unidirectional, peer access enabled", 395.0),
            fig("GPU 0→1 unidirectional, peer access disabled", 21.0),
            fig("GPU 0→3 unidirectional, peer access disabled", 20.0),
        ];
        let line = P2p::takeaway(&result(figures, vec![])).unwrap();
        assert!(
            line.starts_with(
                "peer access made copies 18.8× faster than staging through the host (GPU 0→1: 395 vs 21.0 GB/s)"
            ),
            "{line}"
        );
        let staged = vec![fig("GPU 0→3 unidirectional, peer access disabled", 20.0)];
        let line = P2p::takeaway(&result(staged, vec![])).unwrap();
        assert!(line.starts_with("no pair here has peer access") && line.contains("20.0 GB/s"), "{line}");
        assert_eq!(P2p::takeaway(&result(vec![], vec![])), None);
    }
}
