"""Spans: GPU time between CUDA events, memory delta and peak of a call.

Recording a span never synchronizes: the events are queued and read later
(by the attachment's thread, or by the logging resolver without a server).

A span leaves no trace in the process: it never resets the allocator's peak
counters nor changes a setting, so `torch.cuda.max_memory_allocated()` reads
the same with or without gpudash. It reads `memory_stats()` before and after
the call: when the call raised the process's peak, that new peak is the call's
own (exact); otherwise the call's peak is at most the process's peak so far,
reported as an upper bound ("≤ N"). `span(..., exact_peak=True)` resets the
peak counters (`torch.cuda.reset_peak_memory_stats`) to measure the call's own
peak exactly, which changes what `max_memory_allocated()` reads afterwards.
"""

import collections
import functools
import logging
import threading
import time

from . import _allocator

log = logging.getLogger("gpudash")

# Spans waiting for their end event: (name, device, start_ms, start_event, end_event, delta, peak, bound).
_pending = collections.deque(maxlen=10_000)
_lock = threading.Lock()
_resolver = None
# Set by attach(): then the attachment ships resolved spans instead of logging them.
_sink = None


def _torch():
    try:
        import torch  # noqa: PLC0415 - torch is optional until a span or attach runs

        return torch if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - no torch, or a broken one: spans degrade to wall time
        return None


class span:  # noqa: N801 - used like a function: `with gpudash.span("step"):`
    """Measures the enclosed GPU work: `with gpudash.span("forward"): ...`.

    By default nothing in the process is reset or changed (see the module's note on peaks);
    `exact_peak=True` calls `torch.cuda.reset_peak_memory_stats()` at the start of the span.
    A `torch.cuda.OutOfMemoryError` leaving the span is reported with the allocator map
    (when attached with `capture_oom`) before it propagates.
    """

    def __init__(self, name, device=None, exact_peak=False):
        self.name = str(name)[:200] or "span"
        self.device = device
        self.exact_peak = bool(exact_peak)

    def __enter__(self):
        self._torch = torch = _torch()
        self._start_ms = int(time.time() * 1000)
        if torch is None:
            self._t0 = time.perf_counter()
            return self
        try:
            dev = torch.cuda.current_device() if self.device is None else int(self.device)
            self._dev = dev
            if self.exact_peak:
                # Asked for explicitly: the user's peak counters start over here.
                torch.cuda.reset_peak_memory_stats(dev)
            stats = torch.cuda.memory_stats(dev)
            self._before = int(stats.get("allocated_bytes.all.current", 0))
            self._peak_before = -1 if self.exact_peak else int(stats.get("allocated_bytes.all.peak", 0))
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record(torch.cuda.current_stream(dev))
        except Exception as error:  # noqa: BLE001 - a span must never break the training step
            log.debug("gpudash span %s: cannot record: %r", self.name, error)
            self._torch = None
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None:
            _allocator.report_oom(exc)
        torch = self._torch
        if torch is None:
            elapsed = (time.perf_counter() - self._t0) * 1000
            _deliver({"name": self.name, "device": 0, "start_ms": self._start_ms, "elapsed_ms": elapsed,
                      "memory_delta": 0, "memory_peak": 0, "peak_bound": False})
            return False
        try:
            self._end.record(torch.cuda.current_stream(self._dev))
            stats = torch.cuda.memory_stats(self._dev)
            after = int(stats.get("allocated_bytes.all.current", 0))
            peak = int(stats.get("allocated_bytes.all.peak", 0))
            # The process's peak rose during the call: that peak is the call's. Otherwise it bounds it.
            bound = peak <= self._peak_before
            _pending.append((self.name, self._dev, self._start_ms, self._start, self._end, after - self._before, peak,
                             bound))
            _ensure_resolver()
        except Exception as error:  # noqa: BLE001
            log.debug("gpudash span %s: cannot finish: %r", self.name, error)
        return False


def monitor(fn=None, *, name=None, device=None, exact_peak=False):
    """Decorator form of `span`: `@gpudash.monitor` or `@gpudash.monitor(name="step")`."""

    def wrap(f):
        label = name or getattr(f, "__qualname__", getattr(f, "__name__", "call"))

        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            with span(label, device=device, exact_peak=exact_peak):
                return f(*args, **kwargs)

        return wrapper

    return wrap(fn) if fn is not None else wrap


def resolve_ready():
    """Spans whose end event has completed, as report dicts; the rest stay queued."""
    ready, waiting = [], []
    with _lock:
        while _pending:
            item = _pending.popleft()
            name, dev, start_ms, start, end, delta, peak, bound = item
            try:
                if not end.query():
                    waiting.append(item)
                    continue
                elapsed = float(start.elapsed_time(end))
            except Exception as error:  # noqa: BLE001 - a lost event loses one span, nothing else
                log.debug("gpudash span %s: %r", name, error)
                continue
            ready.append({"name": name, "device": int(dev), "start_ms": int(start_ms), "elapsed_ms": elapsed,
                          "memory_delta": int(delta), "memory_peak": int(peak), "peak_bound": bool(bound)})
        _pending.extend(waiting)
    return ready


def _deliver(record):
    if _sink is not None:
        _sink(record)
    else:
        log.info("%s: %.3f ms, memory %+d bytes, peak %s%d bytes", record["name"], record["elapsed_ms"],
                 record["memory_delta"], "≤ " if record.get("peak_bound") else "", record["memory_peak"])


def _ensure_resolver():
    """Without an attachment, a small daemon thread logs spans as their events complete."""
    global _resolver
    if _sink is not None or (_resolver is not None and _resolver.is_alive()):
        return
    with _lock:
        if _resolver is not None and _resolver.is_alive():
            return
        _resolver = threading.Thread(target=_resolve_forever, name="gpudash-spans", daemon=True)
        _resolver.start()


def _resolve_forever():
    while _sink is None:
        for record in resolve_ready():
            _deliver(record)
        time.sleep(0.2)
