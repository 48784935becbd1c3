//! The precision experiment in PyTorch's words, its [`InPyTorch`]: the `torch.cuda`
//! calls that do what it measures, and what a run's figures mean for a PyTorch program.

use shared::lab::{Figure, RunResult};

use super::Precision;
use crate::experiments::pytorch::{InPyTorch, median, times};

impl InPyTorch for Precision {
    const SNIPPET: &'static str = "import torch
torch.backends.cuda.matmul.allow_tf32 = True        # fp32 matmuls on tensor cores (TF32)
a = torch.randn(8192, 8192, device=\"cuda\")
b = torch.randn(8192, 8192, device=\"cuda\")
with torch.autocast(\"cuda\", dtype=torch.bfloat16):
    c = a @ b                                       # bf16 inputs, fp32 accumulate";

    fn takeaway(result: &RunResult) -> Option<String> {
        line(&result.figures)
    }
}

fn line(figures: &[Figure]) -> Option<String> {
    // The largest order measured in fp32 and in a faster type: small GEMMs say little about a model.
    let order_of = |f: &Figure| f.name.strip_prefix("fp32 ")?.parse::<u32>().ok();
    let mut orders: Vec<u32> = figures.iter().filter_map(order_of).collect();
    shared::order::sort(&mut orders);
    for order in orders.into_iter().rev() {
        let Some(fp32) = median(figures, &format!("fp32 {order}")) else { continue };
        let gain = |dtype: &str| median(figures, &format!("{dtype} {order}")).map(|v| v / fp32);
        let parts: Vec<String> = [("bf16", "bf16 autocast"), ("tf32", "tf32 (allow_tf32)"), ("fp16", "fp16 autocast")]
            .into_iter()
            .filter_map(|(dtype, words)| Some(format!("{words} ran {} the fp32 FLOP/s", times(gain(dtype)?))))
            .collect();
        if let Some((first, rest)) = parts.split_first() {
            let rest = rest.iter().map(|p| format!(", {p}")).collect::<String>();
            return Some(format!("at n = {order}, {first}{rest}"));
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::experiments::pytorch::testing::{fig, result, says};

    #[test]
    fn the_snippet_says_it_in_pytorchs_words() {
        says(Precision::SNIPPET, &["allow_tf32", "torch.autocast(\"cuda\", dtype=torch.bfloat16)"]);
    }

    #[test]
    fn precision_compares_with_fp32_at_the_largest_order() {
        let figures = vec![
            fig("fp32 1024", 25.0),
            fig("bf16 1024", 200.0),
            fig("fp32 8192", 51.0),
            fig("tf32 8192", 414.0),
            fig("bf16 8192", 158.1),
        ];
        let line = Precision::takeaway(&result(figures, vec![])).unwrap();
        assert_eq!(
            line,
            "at n = 8192, bf16 autocast ran 3.10× the fp32 FLOP/s, tf32 (allow_tf32) ran 8.12× the fp32 FLOP/s"
        );
        let no_fp32 = vec![fig("bf16 8192", 790.0), fig("fp16 8192", 770.0)];
        assert_eq!(Precision::takeaway(&result(no_fp32, vec![])), None);
        assert_eq!(Precision::takeaway(&result(vec![fig("fp32 4096", 50.0)], vec![])), None);
    }
}
