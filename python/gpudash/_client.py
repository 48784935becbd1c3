"""The attachment: a daemon thread that reports the caching allocator's
figures and finished spans to gpudash, carries out remote empty_cache, and
(with share_allocator_map) sends the allocator map every map_interval seconds,
on request, and at an out-of-memory error.

It never raises into the caller and never blocks the training loop: every
failure is counted, logged once, and retried with backoff.
"""

import collections
import json
import logging
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

from . import _allocator, _spans

log = logging.getLogger("gpudash")

PROTOCOL_VERSION = 1
MAX_BACKOFF_S = 30.0
# The server accepts at most 500 spans a report; keep well under its 64 KiB body limit.
SPANS_PER_REPORT = 200
# An out-of-memory report waits at most this long before the exception propagates.
OOM_SEND_TIMEOUT_S = 2.0

_current = None
_current_lock = threading.Lock()


def _torch():
    try:
        import torch  # noqa: PLC0415

        return torch
    except Exception:  # noqa: BLE001
        return None


def _cuda_ready(torch):
    """CUDA is in use already: the client never initializes it."""
    try:
        return bool(torch.cuda.is_available() and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001
        return False


def _memory(torch):
    """One entry per visible device, from torch.cuda.memory_stats (no CUDA init if none yet)."""
    devices = []
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return devices
        count = torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return devices
    for index in range(count):
        try:
            stats = torch.cuda.memory_stats(index)
        except Exception:  # noqa: BLE001
            continue
        if not stats:
            continue
        uuid = None
        try:
            raw = str(torch.cuda.get_device_properties(index).uuid)
            uuid = raw if raw.startswith("GPU-") else "GPU-" + raw
        except Exception:  # noqa: BLE001
            pass
        devices.append({
            "device": index,
            "uuid": uuid,
            "allocated": int(stats.get("allocated_bytes.all.current", 0)),
            "allocated_peak": int(stats.get("allocated_bytes.all.peak", 0)),
            "reserved": int(stats.get("reserved_bytes.all.current", 0)),
            "reserved_peak": int(stats.get("reserved_bytes.all.peak", 0)),
            "active": int(stats.get("active_bytes.all.current", 0)),
            "inactive_split": int(stats.get("inactive_split_bytes.all.current", 0)),
            "alloc_retries": int(stats.get("num_alloc_retries", 0)),
            "ooms": int(stats.get("num_ooms", 0)),
        })
    return devices


def _process_name():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return " ".join(p.decode(errors="replace") for p in f.read().split(b"\0") if p)[:1000]
    except OSError:
        return " ".join([sys.executable] + sys.argv)[:1000]


class Attachment:
    """A running attachment; `stats()` says how it fares, `detach()` stops it."""

    def __init__(self, url, token=None, interval=1.0, allow_remote_empty_cache=False, share_allocator_map=False,
                 map_interval=5.0, capture_oom=None):
        self.url = str(url).rstrip("/")
        self.token = token
        self.interval = min(max(float(interval), 0.1), 3600.0)
        self.allow_remote_empty_cache = bool(allow_remote_empty_cache)
        self.share_allocator_map = bool(share_allocator_map)
        self.map_interval = min(max(float(map_interval), 0.5), 3600.0)
        self.capture_oom = self.share_allocator_map if capture_oom is None else bool(capture_oom)
        self._map_due = 0.0
        self._map_requested = False
        self._attached = False
        self._spans = collections.deque(maxlen=5000)
        self._results = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._stats = {"reports": 0, "failures": 0, "spans_sent": 0, "empty_caches": 0, "last_error": None,
                       "report_seconds": 0.0, "maps_sent": 0, "map_failures": 0, "map_ms": 0.0, "ooms_sent": 0}
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="gpudash-attach", daemon=True)
        self._thread.start()

    def stats(self):
        with self._lock:
            return dict(self._stats, alive=self._thread.is_alive())

    def detach(self, timeout=2.0):
        """Stops reporting (one last report is attempted)."""
        self._stop.set()
        self._thread.join(timeout)

    def _add_span(self, record):
        self._spans.append(record)

    def _run(self):
        backoff = self.interval
        while True:
            started = time.perf_counter()
            try:
                self._report_once()
                self._maybe_send_map()
                backoff = self.interval
            except Exception as error:  # noqa: BLE001 - never raise into the training process
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                with self._lock:
                    self._stats["failures"] += 1
                    self._stats["last_error"] = repr(error)
                if not self._warned:
                    log.warning("gpudash: cannot report to %s (%r); retrying with backoff", self.url, error)
                    self._warned = True
            with self._lock:
                self._stats["report_seconds"] += time.perf_counter() - started
            if self._stop.wait(backoff):
                return

    def _report_once(self):
        torch = _torch()
        for record in _spans.resolve_ready():
            self._spans.append(record)
        spans = [self._spans.popleft() for _ in range(min(len(self._spans), SPANS_PER_REPORT))]
        results, self._results = self._results, []
        body = {
            "version": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "host": socket.gethostname()[:255] or "unknown",
            "process_name": _process_name(),
            "torch_version": str(getattr(torch, "__version__", "none")),
            "cuda_version": getattr(getattr(torch, "version", None), "cuda", None),
            "allow_remote_empty_cache": self.allow_remote_empty_cache,
            "share_allocator_map": self.share_allocator_map,
            "interval_s": self.interval,
            "devices": _memory(torch) if torch is not None else [],
            "spans": spans,
            "command_results": results,
        }
        try:
            answer = self._post("/api/bridge/report", body, max(2.0, self.interval))
        except Exception:
            # Nothing was delivered: keep the spans and results for the next try.
            self._spans.extendleft(reversed(spans))
            self._results = results + self._results
            raise
        with self._lock:
            self._stats["reports"] += 1
            self._stats["spans_sent"] += len(spans)
        self._warned = False
        self._attached = True
        for command in answer.get("commands", []):
            if command.get("kind") == "empty_cache":
                self._results.append(self._empty_cache(torch, int(command["id"])))
            elif command.get("kind") == "allocator_map":
                self._map_requested = True

    def _post(self, path, body, timeout):
        """POSTs JSON; the answer's JSON, or None for an empty one. Raises on any failure."""
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), headers=headers,
                                         method="POST")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data = response.read()
        return json.loads(data) if data else None

    def _maybe_send_map(self):
        """Sends the allocator map when it is due or the page asked for one."""
        if not self.share_allocator_map or not self._attached:
            return
        requested, now = self._map_requested, time.monotonic()
        if not requested and now < self._map_due:
            return
        self._map_requested = False
        self._map_due = now + self.map_interval
        self._send_map("requested" if requested else "periodic", None, max(2.0, self.interval))

    def _send_map(self, reason, oom, timeout):
        torch = _torch()
        if torch is None or not _cuda_ready(torch):
            return
        try:
            body = _allocator.take(torch, reason, oom)
            body.update(pid=os.getpid(), host=socket.gethostname()[:255] or "unknown")
            self._post("/api/bridge/allocator", body, timeout)
            with self._lock:
                self._stats["maps_sent"] += 1
                self._stats["map_ms"] += body["cost_ms"]
                if oom is not None:
                    self._stats["ooms_sent"] += 1
        except Exception as error:  # noqa: BLE001 - a lost map loses one picture, nothing else
            with self._lock:
                self._stats["map_failures"] += 1
                self._stats["last_error"] = repr(error)
            log.debug("gpudash: allocator map not sent: %r", error)

    def _on_oom(self, exc):
        """Called in the raising thread: sends the map at this OOM before the exception propagates."""
        torch = _torch()
        device = 0
        try:
            if torch is not None:
                device = int(torch.cuda.current_device())
        except Exception:  # noqa: BLE001
            pass
        match = re.search(r"GPU ([0-9]+) has a total capacity", str(exc))
        if match:
            device = int(match.group(1))
        oom = {"device": device, "requested_bytes": _allocator.requested_bytes(exc)}
        self._send_map("oom", oom, OOM_SEND_TIMEOUT_S)

    def _empty_cache(self, torch, command_id):
        if not self.allow_remote_empty_cache or torch is None:
            return {"id": command_id, "ok": False, "released_bytes": 0}
        try:
            before = sum(d["reserved"] for d in _memory(torch))
            torch.cuda.empty_cache()
            after = sum(d["reserved"] for d in _memory(torch))
            with self._lock:
                self._stats["empty_caches"] += 1
            log.info("gpudash: remote empty_cache released %d bytes", max(before - after, 0))
            return {"id": command_id, "ok": True, "released_bytes": max(before - after, 0)}
        except Exception as error:  # noqa: BLE001
            log.warning("gpudash: remote empty_cache failed: %r", error)
            return {"id": command_id, "ok": False, "released_bytes": 0}


def attach(url, token=None, interval=1.0, allow_remote_empty_cache=False, share_allocator_map=False,
           map_interval=5.0, capture_oom=None):
    """Starts reporting this process to the gpudash at `url`; returns the `Attachment`.

    share_allocator_map: send a summary of torch.cuda.memory_snapshot() every `map_interval`
    seconds and when the page asks (sizes only: no addresses, no stack traces).
    capture_oom (default: as share_allocator_map): when torch.cuda.OutOfMemoryError leaves a span,
    an `oom_guard()` block or the program (sys.excepthook / threading.excepthook are chained),
    send the map at that moment, waiting at most 2 s, before the exception propagates.
    Attaching again replaces the previous attachment.
    """
    global _current
    with _current_lock:
        if _current is not None:
            _current.detach(timeout=0.5)
        _current = Attachment(url, token=token, interval=interval, allow_remote_empty_cache=allow_remote_empty_cache,
                              share_allocator_map=share_allocator_map, map_interval=map_interval,
                              capture_oom=capture_oom)
        _spans._sink = _current._add_span
        _allocator._on_oom = _current._on_oom if _current.capture_oom else None
        if _current.capture_oom:
            _allocator.install_hooks()
        return _current


def detach():
    """Stops reporting; spans are logged again."""
    global _current
    with _current_lock:
        if _current is not None:
            _current.detach()
            _current = None
        _spans._sink = None
        _allocator._on_oom = None
