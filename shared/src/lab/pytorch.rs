//! The lab in PyTorch's words: for each experiment, the `torch.cuda` calls that do
//! what it measured ([`snippet`]), and one line on what this run's figures mean
//! for a PyTorch program ([`takeaway`]). Both the page and the server's exports
//! read them from here.

use super::{ExperimentKind, Figure, MemoryStep, RunResult};
use crate::units::{format_bytes, three_digits};

/// What the experiment measured, written as PyTorch does it: a short script to copy.
pub fn snippet(kind: ExperimentKind) -> &'static str {
    match kind {
        ExperimentKind::Memory => {
            "import torch
x = [torch.empty(256 << 20, dtype=torch.uint8, device=\"cuda\") for _ in range(8)]
print(torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
del x[::2]                      # freed blocks stay reserved by the caching allocator
print(torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
x.clear()
torch.cuda.empty_cache()        # hands this process's cached blocks back to the driver
print(torch.cuda.memory_reserved())"
        }
        ExperimentKind::Transfer => {
            "import torch
host = torch.randn(64 << 20).pin_memory()           # page-locked: DMA straight from it
dev = host.to(\"cuda\", non_blocking=True)           # async copy, overlaps with compute
loader = torch.utils.data.DataLoader(dataset, batch_size=64, pin_memory=True)
for batch in loader:
    batch = batch.to(\"cuda\", non_blocking=True)"
        }
        ExperimentKind::Streams => {
            "import torch
copy_stream = torch.cuda.Stream()
with torch.cuda.stream(copy_stream):
    nxt = host_batch.to(\"cuda\", non_blocking=True)  # host_batch pinned
out = model(cur)                                    # computes on the default stream meanwhile
torch.cuda.current_stream().wait_stream(copy_stream)
nxt.record_stream(torch.cuda.current_stream())"
        }
        ExperimentKind::Precision => {
            "import torch
torch.backends.cuda.matmul.allow_tf32 = True        # fp32 matmuls on tensor cores (TF32)
a = torch.randn(8192, 8192, device=\"cuda\")
b = torch.randn(8192, 8192, device=\"cuda\")
with torch.autocast(\"cuda\", dtype=torch.bfloat16):
    c = a @ b                                       # bf16 inputs, fp32 accumulate"
        }
        ExperimentKind::Latency => {
            "import torch
start = torch.cuda.Event(enable_timing=True)
end = torch.cuda.Event(enable_timing=True)
start.record()
y = x + 1                                           # the work to time
end.record()
torch.cuda.synchronize()
print(start.elapsed_time(end), \"ms\")                # GPU time between the events"
        }
        ExperimentKind::P2p => {
            "import torch
print(torch.cuda.can_device_access_peer(0, 1))      # direct GPU-to-GPU access?
x = torch.randn(64 << 20, device=\"cuda:0\")
y = x.to(\"cuda:1\", non_blocking=True)              # peer copy, or staged through the host
torch.cuda.synchronize(\"cuda:1\")"
        }
        ExperimentKind::Collectives => {
            "import torch, torch.distributed as dist        # torchrun --nproc-per-node=N this.py
dist.init_process_group(\"nccl\")
torch.cuda.set_device(dist.get_rank())
x = torch.full((64 << 20,), dist.get_rank() + 1.0, device=\"cuda\")
dist.all_reduce(x)                                  # sum over ranks; also all_gather_into_tensor, reduce_scatter_tensor, broadcast
model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
with model.no_sync():                               # accumulation steps: no gradient all-reduce
    loss.backward()"
        }
    }
}

/// One line on what this run's figures mean for a PyTorch program, computed from them:
/// "pinned copies were 6.8× faster than pageable here: use DataLoader(pin_memory=True)".
/// `None` when the figures it needs are missing (a failed run, a subset of the experiment).
pub fn takeaway(kind: ExperimentKind, result: &RunResult) -> Option<String> {
    match kind {
        ExperimentKind::Memory => memory(&result.memory_steps, &result.figures),
        ExperimentKind::Transfer => transfer(&result.figures),
        ExperimentKind::Streams => streams(&result.figures),
        ExperimentKind::Precision => precision(&result.figures),
        ExperimentKind::Latency => latency(&result.figures),
        ExperimentKind::P2p => p2p(&result.figures),
        ExperimentKind::Collectives => collectives(&result.figures),
    }
}

fn median(figures: &[Figure], name: &str) -> Option<f64> {
    figures.iter().find(|f| f.name == name).map(|f| f.stats.median).filter(|v| v.is_finite() && *v > 0.0)
}

/// "6.8×", "15×".
fn times(ratio: f64) -> String {
    format!("{}×", three_digits(ratio))
}

fn memory(steps: &[MemoryStep], figures: &[Figure]) -> Option<String> {
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

/// The figure of `copy` at the largest size measured ("h2d_pinned at 1.00 GiB"), with its size.
fn largest<'a>(figures: &'a [Figure], copy: &str) -> Option<(&'a str, f64)> {
    let prefix = format!("{copy} at ");
    figures.iter().find_map(|f| Some((f.name.strip_prefix(&prefix)?, f.stats.median)))
}

fn transfer(figures: &[Figure]) -> Option<String> {
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

fn streams(figures: &[Figure]) -> Option<String> {
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

fn precision(figures: &[Figure]) -> Option<String> {
    // The largest order measured in fp32 and in a faster type: small GEMMs say little about a model.
    let order_of = |f: &Figure| f.name.strip_prefix("fp32 ")?.parse::<u32>().ok();
    let mut orders: Vec<u32> = figures.iter().filter_map(order_of).collect();
    crate::order::sort(&mut orders);
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

fn latency(figures: &[Figure]) -> Option<String> {
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

/// The DDP step's share of communication, or the largest all_reduce's busbw.
fn collectives(figures: &[Figure]) -> Option<String> {
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

fn p2p(figures: &[Figure]) -> Option<String> {
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
    use crate::lab::{ChartSpec, Stats};

    const GIB: u64 = 1 << 30;

    fn fig(name: &str, median: f64) -> Figure {
        Figure { name: name.into(), unit: String::new(), stats: Stats { median, min: median, max: median, n: 3 } }
    }

    fn result(figures: Vec<Figure>, memory_steps: Vec<MemoryStep>) -> RunResult {
        RunResult {
            chart: ChartSpec::Bars { y_label: String::new() },
            unit: String::new(),
            series: vec![],
            references: vec![],
            figures,
            checks: vec![],
            memory_steps,
            timeline: vec![],
            matrices: vec![],
            notes: vec![],
            l2_bytes: None,
        }
    }

    fn step(label: &str, allocated: u64, reserved: u64) -> MemoryStep {
        MemoryStep { label: label.into(), allocated, reserved, nvml_used: None }
    }

    #[test]
    fn every_experiment_has_a_snippet_in_pytorchs_words() {
        let wanted = [
            (ExperimentKind::Memory, &["torch.cuda.memory_allocated()", "memory_reserved()", "empty_cache()"][..]),
            (ExperimentKind::Transfer, &["pin_memory=True", "non_blocking=True"]),
            (ExperimentKind::Streams, &["torch.cuda.Stream()", "with torch.cuda.stream("]),
            (ExperimentKind::Precision, &["allow_tf32", "torch.autocast(\"cuda\", dtype=torch.bfloat16)"]),
            (ExperimentKind::Latency, &["torch.cuda.Event(enable_timing=True)", "elapsed_time"]),
            (ExperimentKind::P2p, &["to(\"cuda:1\"", "torch.cuda.can_device_access_peer"]),
            (ExperimentKind::Collectives, &["dist.all_reduce(x)", "bucket_cap_mb=25", "no_sync()"]),
        ];
        assert_eq!(wanted.len(), ExperimentKind::ALL.len());
        for (kind, words) in wanted {
            let text = snippet(kind);
            assert!(text.starts_with("import torch"), "{kind:?}");
            for word in words {
                assert!(text.contains(word), "{kind:?} lacks {word}: {text}");
            }
        }
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
        let line = takeaway(ExperimentKind::Memory, &result(figures, steps.clone())).unwrap();
        assert_eq!(
            line,
            "empty_cache() returned 2.00 GiB to the driver; other processes can use it now, but the next allocation \
             costs 26.0× more than one served from the cache"
        );
        let line = takeaway(ExperimentKind::Memory, &result(vec![], steps)).unwrap();
        assert!(line.ends_with("can use it now"), "{line}");
        // A pool that caches nothing (the faulty one) has nothing to return, and says so.
        let uncached = vec![
            step("start", 0, 0),
            step("alloc block 1", GIB, GIB),
            step("free all", 0, 0),
            step("empty_cache", 0, 0),
        ];
        assert!(takeaway(ExperimentKind::Memory, &result(vec![], uncached)).unwrap().contains("nothing to return"));
        assert_eq!(takeaway(ExperimentKind::Memory, &result(vec![], vec![])), None, "no steps, no line");
    }

    #[test]
    fn transfer_compares_pinned_and_pageable_at_the_same_size() {
        let figures = vec![fig("h2d_pageable at 1.00 GiB", 7.0), fig("h2d_pinned at 1.00 GiB", 47.6)];
        let line = takeaway(ExperimentKind::Transfer, &result(figures, vec![])).unwrap();
        assert!(line.starts_with("pinned copies were 6.80× faster than pageable here (H2D, 1.00 GiB)"), "{line}");
        assert!(line.contains("DataLoader(pin_memory=True)"), "{line}");
        let same = vec![fig("d2h_pageable at 64.0 MiB", 50.0), fig("d2h_pinned at 64.0 MiB", 52.0)];
        let line = takeaway(ExperimentKind::Transfer, &result(same, vec![])).unwrap();
        assert!(line.contains("about the same speed here (D2H, 64.0 MiB: 1.04×)"), "{line}");
        let only_pinned = vec![fig("h2d_pinned at 1.00 GiB", 47.6), fig("d2d at 1.00 GiB", 4000.0)];
        assert_eq!(takeaway(ExperimentKind::Transfer, &result(only_pinned, vec![])), None);
        let sizes_differ = vec![fig("h2d_pageable at 4.00 KiB", 1.0), fig("h2d_pinned at 1.00 GiB", 47.6)];
        assert_eq!(takeaway(ExperimentKind::Transfer, &result(sizes_differ, vec![])), None);
    }

    #[test]
    fn streams_say_how_much_overlap_gained() {
        let line = takeaway(ExperimentKind::Streams, &result(vec![fig("overlap gain", 1.7)], vec![])).unwrap();
        assert!(line.starts_with("streams overlapped copy and compute: 1.70× faster than one stream"), "{line}");
        let none = takeaway(ExperimentKind::Streams, &result(vec![fig("overlap gain", 1.01)], vec![])).unwrap();
        assert!(none.starts_with("copy and compute did not overlap here (1.01×)"), "{none}");
        let kernels = result(vec![fig("concurrent kernels gain", 7.6)], vec![]);
        assert!(takeaway(ExperimentKind::Streams, &kernels).unwrap().contains("7.60× faster"));
        assert_eq!(takeaway(ExperimentKind::Streams, &result(vec![fig("copy alone", 4.8)], vec![])), None);
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
        let line = takeaway(ExperimentKind::Precision, &result(figures, vec![])).unwrap();
        assert_eq!(
            line,
            "at n = 8192, bf16 autocast ran 3.10× the fp32 FLOP/s, tf32 (allow_tf32) ran 8.12× the fp32 FLOP/s"
        );
        let no_fp32 = vec![fig("bf16 8192", 790.0), fig("fp16 8192", 770.0)];
        assert_eq!(takeaway(ExperimentKind::Precision, &result(no_fp32, vec![])), None);
        assert_eq!(takeaway(ExperimentKind::Precision, &result(vec![fig("fp32 4096", 50.0)], vec![])), None);
    }

    #[test]
    fn latency_names_the_launch_cost_and_what_a_graph_saves() {
        let figures = vec![
            fig("kernel launch (host)", 4.0),
            fig("launch + synchronize (host)", 8.9),
            fig("CUDA graph of empty kernels, per kernel (GPU events)", 0.9),
        ];
        let line = takeaway(ExperimentKind::Latency, &result(figures, vec![])).unwrap();
        assert!(
            line.starts_with(
                "each kernel launch cost the host 4.00 µs, 0.900 µs per kernel in a CUDA graph (4.44× less)"
            )
        );
        assert!(
            line.ends_with("a launch plus synchronize took 8.90 µs, which .item() and print(tensor) pay in a loop")
        );
        assert_eq!(takeaway(ExperimentKind::Latency, &result(vec![fig("event record (host)", 1.0)], vec![])), None);
    }

    #[test]
    fn p2p_compares_peer_access_with_the_host_and_says_when_there_is_none() {
        let figures = vec![
            fig("GPU 0→1 unidirectional, peer access enabled", 395.0),
            fig("GPU 0→1 unidirectional, peer access disabled", 21.0),
            fig("GPU 0→3 unidirectional, peer access disabled", 20.0),
        ];
        let line = takeaway(ExperimentKind::P2p, &result(figures, vec![])).unwrap();
        assert!(
            line.starts_with(
                "peer access made copies 18.8× faster than staging through the host (GPU 0→1: 395 vs 21.0 GB/s)"
            ),
            "{line}"
        );
        let staged = vec![fig("GPU 0→3 unidirectional, peer access disabled", 20.0)];
        let line = takeaway(ExperimentKind::P2p, &result(staged, vec![])).unwrap();
        assert!(line.starts_with("no pair here has peer access") && line.contains("20.0 GB/s"), "{line}");
        assert_eq!(takeaway(ExperimentKind::P2p, &result(vec![], vec![])), None);
    }
}
