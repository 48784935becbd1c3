"""Spans: GPU time between CUDA events, memory delta and peak of a call.

Recording a span never synchronizes: the events are queued and read later
(by the attachment's thread, or by the logging resolver without a server).
"""

import collections
import functools
import logging
import threading
import time

log = logging.getLogger("gpudash")

# Spans waiting for their end event: (name, device, start_ms, start_event, end_event, delta, peak).
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
    """Measures the enclosed GPU work: `with gpudash.span("forward"): ...`."""

    def __init__(self, name, device=None):
        self.name = str(name)[:200] or "span"
        self.device = device

    def __enter__(self):
        self._torch = torch = _torch()
        self._start_ms = int(time.time() * 1000)
        if torch is None:
            self._t0 = time.perf_counter()
            return self
        try:
            dev = torch.cuda.current_device() if self.device is None else int(self.device)
            self._dev = dev
            self._before = torch.cuda.memory_allocated(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record(torch.cuda.current_stream(dev))
        except Exception as error:  # noqa: BLE001 - a span must never break the training step
            log.debug("gpudash span %s: cannot record: %r", self.name, error)
            self._torch = None
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        torch = self._torch
        if torch is None:
            elapsed = (time.perf_counter() - self._t0) * 1000
            _deliver({"name": self.name, "device": 0, "start_ms": self._start_ms, "elapsed_ms": elapsed,
                      "memory_delta": 0, "memory_peak": 0})
            return False
        try:
            self._end.record(torch.cuda.current_stream(self._dev))
            after = torch.cuda.memory_allocated(self._dev)
            peak = torch.cuda.max_memory_allocated(self._dev)
            _pending.append((self.name, self._dev, self._start_ms, self._start, self._end, after - self._before, peak))
            _ensure_resolver()
        except Exception as error:  # noqa: BLE001
            log.debug("gpudash span %s: cannot finish: %r", self.name, error)
        return False


def monitor(fn=None, *, name=None, device=None):
    """Decorator form of `span`: `@gpudash.monitor` or `@gpudash.monitor(name="step")`."""

    def wrap(f):
        label = name or getattr(f, "__qualname__", getattr(f, "__name__", "call"))

        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            with span(label, device=device):
                return f(*args, **kwargs)

        return wrapper

    return wrap(fn) if fn is not None else wrap


def resolve_ready():
    """Spans whose end event has completed, as report dicts; the rest stay queued."""
    ready, waiting = [], []
    with _lock:
        while _pending:
            item = _pending.popleft()
            name, dev, start_ms, start, end, delta, peak = item
            try:
                if not end.query():
                    waiting.append(item)
                    continue
                elapsed = float(start.elapsed_time(end))
            except Exception as error:  # noqa: BLE001 - a lost event loses one span, nothing else
                log.debug("gpudash span %s: %r", name, error)
                continue
            ready.append({"name": name, "device": int(dev), "start_ms": int(start_ms), "elapsed_ms": elapsed,
                          "memory_delta": int(delta), "memory_peak": int(peak)})
        _pending.extend(waiting)
    return ready


def _deliver(record):
    if _sink is not None:
        _sink(record)
    else:
        log.info("%s: %.3f ms, memory %+d bytes, peak %d bytes", record["name"], record["elapsed_ms"],
                 record["memory_delta"], record["memory_peak"])


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
