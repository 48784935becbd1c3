"""What `gpudash.span` costs the training loop: the wall time of entering and leaving a span
while the GPU is still busy with the work it encloses (a span must never wait for the GPU).

    python3 python/bench/span_cost.py [SPANS]

Uses the installed torch when it has CUDA, else the CPU stand-in from python/tests/fake_torch
(then the figure is the client's own Python cost; the line says which). Prints p50 / p99 / max
against the reference, and does not fail on timing: timing targets live here, not in the tests.
"""

import logging
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
# The bound the client's test used to assert: a span far below it cannot be waiting for the GPU.
REFERENCE_MS = 50.0


def load_torch():
    try:
        import torch  # noqa: PLC0415

        if torch.cuda.is_available():
            return torch, f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}"
    except Exception:  # noqa: BLE001 - no torch, or one without CUDA: use the stand-in
        pass
    for name in [n for n in sys.modules if n == "torch" or n.startswith("torch.")]:
        del sys.modules[name]
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "fake_torch"))
    import torch  # noqa: PLC0415

    torch.cuda.state.event_delay_s = 3600.0  # the stand-in GPU stays busy for the whole run
    return torch, "the CPU stand-in torch (python/tests/fake_torch): the client's own cost"


def busy_work(torch):
    """Queues work that keeps a real GPU busy past the span's exit; nothing on the stand-in."""
    if getattr(torch, "__version__", "").endswith("+fake"):
        return lambda i: None
    a = torch.randn(4096, 4096, device="cuda")

    def work(i):
        if i % 256 == 0:
            torch.cuda.synchronize()  # untimed: keeps the launch queue from filling up
        a @ a

    return work


def main():
    spans = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    torch, which = load_torch()
    import gpudash  # noqa: PLC0415

    logging.getLogger("gpudash").setLevel(logging.CRITICAL)  # its reports fail on purpose, below
    # Attached to an address nobody listens on, reporting once a minute: spans queue as in training.
    gpudash.attach("http://127.0.0.1:9", interval=60)
    work = busy_work(torch)
    times = []
    for i in range(spans):
        work(i)
        started = time.perf_counter()
        with gpudash.span("bench"):
            pass
        times.append((time.perf_counter() - started) * 1000.0)
        if i == 0:
            times.clear()  # the first span imports and starts what later ones reuse
    gpudash.detach()
    times.sort()
    p99 = times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]
    verdict = "within" if p99 <= REFERENCE_MS else "OVER"
    print(f"gpudash.span cost, {len(times)} spans, GPU busy at exit, {which}:")
    print(
        f"  p50 {statistics.median(times) * 1000:.1f} µs · p99 {p99 * 1000:.1f} µs · max {times[-1] * 1000:.1f} µs"
        f" — {verdict} the {REFERENCE_MS:.0f} ms reference (p99 / reference = {p99 / REFERENCE_MS:.2e})"
    )


if __name__ == "__main__":
    main()
