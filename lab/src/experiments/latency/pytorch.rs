//! The latency experiment in PyTorch's words, its [`InPyTorch`]: the `torch.cuda`
//! calls that do what it measures, and what a run's figures mean for a PyTorch program.

use shared::lab::{Figure, RunResult};
use shared::units::three_digits;

use super::Latency;
use crate::experiments::pytorch::{InPyTorch, median, times};

impl InPyTorch for Latency {
    const SNIPPET: &'static str = "import torch
start = torch.cuda.Event(enable_timing=True)
end = torch.cuda.Event(enable_timing=True)
start.record()
y = x + 1                                           # the work to time
end.record()
torch.cuda.synchronize()
print(start.elapsed_time(end), \"ms\")                # GPU time between the events";

    fn takeaway(result: &RunResult) -> Option<String> {
        line(&result.figures)
    }
}

fn line(figures: &[Figure]) -> Option<String> {
    let launch = median(figures, "kernel launch (host)")?;
    let round_trip = median(figures, "launch + synchronize (host)");
    let graph = median(figures, "CUDA graph of empty kernels, per kernel (GPU events)");
    let mut line = format!("each kernel launch cost the host {} µs", three_digits(launch));
    if let Some(graph) = graph {
        line.push_str(&format!(
            ", {} µs per kernel in a CUDA graph ({} less): capture small repeated steps with torch.cuda.CUDAGraph",
            three_digits(graph),
            times(launch / graph)
        ));
    }
    if let Some(round_trip) = round_trip {
        line.push_str(&format!(
            "; a launch plus synchronize took {} µs, which .item() and print(tensor) pay in a loop",
            three_digits(round_trip)
        ));
    }
    Some(line)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::experiments::pytorch::testing::{fig, result, says};

    #[test]
    fn the_snippet_says_it_in_pytorchs_words() {
        says(Latency::SNIPPET, &["torch.cuda.Event(enable_timing=True)", "elapsed_time"]);
    }

    #[test]
    fn latency_names_the_launch_cost_and_what_a_graph_saves() {
        let figures = vec![
            fig("kernel launch (host)", 4.0),
            fig("launch + synchronize (host)", 8.9),
            fig("CUDA graph of empty kernels, per kernel (GPU events)", 0.9),
        ];
        let line = Latency::takeaway(&result(figures, vec![])).unwrap();
        assert!(
            line.starts_with(
                "each kernel launch cost the host 4.00 µs, 0.900 µs per kernel in a CUDA graph (4.44× less)"
            )
        );
        assert!(
            line.ends_with("a launch plus synchronize took 8.90 µs, which .item() and print(tensor) pay in a loop")
        );
        assert_eq!(Latency::takeaway(&result(vec![fig("event record (host)", 1.0)], vec![])), None);
    }
}
