"""The allocator map: a compact summary of torch.cuda.memory_snapshot(), and the
capture of one at an out-of-memory error.

The summary never holds an address, a frame or a stack trace: per segment only
its size, stream, pool and how its bytes split into allocated, active and free;
per device a histogram of free-block sizes and the totals. It is bounded
however large the job: at most MAX_SEGMENTS segments are listed (the largest),
the rest are folded into one "other" row.
"""

import re
import sys
import threading
import time

MAP_VERSION = 1
# Segments listed over all devices of one report (the server refuses more per device).
MAX_SEGMENTS = 512

_SIZE = re.compile(r"Tried to allocate ([0-9]+(?:\.[0-9]+)?) ?(bytes|B|KiB|MiB|GiB|TiB)")
_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def requested_bytes(message):
    """The size in "Tried to allocate 2.10 GiB", in bytes, or None."""
    match = _SIZE.search(str(message))
    if not match:
        return None
    return int(round(float(match.group(1)) * _UNITS[match.group(2)]))


def _segments(snapshot):
    # torch >= 2.1 returns {"segments": [...], "device_traces": [...]}; older ones the list itself.
    if isinstance(snapshot, dict):
        return snapshot.get("segments") or []
    return snapshot or []


def _segment(raw):
    size = int(raw.get("total_size", 0))
    blocks = raw.get("blocks") or []
    free_blocks = [int(b.get("size", 0)) for b in blocks if b.get("state") == "inactive"]
    if blocks:
        # The blocks are the truth: free = inactive blocks, active = the rest.
        active = size - sum(free_blocks)
    else:
        # No block list: the segment's free bytes count as one free block.
        active = min(int(raw.get("active_size", size)), size)
        free_blocks = [size - active] if size > active else []
    pool = raw.get("segment_pool_id") or (0, 0)
    return {
        "size": size,
        "stream": int(raw.get("stream", 0) or 0),
        "pool": "small" if raw.get("segment_type") == "small" else "large",
        "private_pool": tuple(pool) != (0, 0),
        "expandable": bool(raw.get("is_expandable", False)),
        "allocated": max(0, min(int(raw.get("allocated_size", 0)), active)),
        "active": active,
        "free": size - active,
        "blocks": max(len(blocks), len(free_blocks), 1),
    }, free_blocks


def summarize(snapshot, max_segments=MAX_SEGMENTS):
    """One map per device in the snapshot: segments (largest first, at most `max_segments` over all
    devices), the rest folded, a power-of-two histogram of free blocks, the totals."""
    by_device = {}
    for raw in _segments(snapshot):
        if int(raw.get("total_size", 0)) <= 0:
            continue
        segment, free_blocks = _segment(raw)
        entry = by_device.setdefault(int(raw.get("device", 0)), ([], []))
        entry[0].append(segment)
        entry[1].extend(size for size in free_blocks if size > 0)
    per_device = max(1, max_segments // max(len(by_device), 1))
    maps = []
    for device, (segments, free_blocks) in sorted(by_device.items()):
        segments.sort(key=lambda s: s["size"], reverse=True)
        listed, rest = segments[:per_device], segments[per_device:]
        histogram = {}
        for size in free_blocks:
            bucket = histogram.setdefault(size.bit_length() - 1, [0, 0])
            bucket[0] += 1
            bucket[1] += size
        maps.append({
            "device": device,
            "segments": listed,
            "other": _fold(rest) if rest else None,
            "free_histogram": [{"log2": k, "count": c, "bytes": b} for k, (c, b) in sorted(histogram.items())],
            "totals": {
                "reserved": sum(s["size"] for s in segments),
                "allocated": sum(s["allocated"] for s in segments),
                "active": sum(s["active"] for s in segments),
                "free_in_segments": sum(free_blocks),
                "largest_free_block": max(free_blocks, default=0),
                "segments": len(segments),
                "blocks": sum(s["blocks"] for s in segments),
            },
        })
    return maps


def _fold(rest):
    return {
        "segments": len(rest),
        **{key: sum(s[key] for s in rest) for key in ("size", "allocated", "active", "free", "blocks")},
    }


def take(torch, reason, oom=None, max_segments=MAX_SEGMENTS):
    """An allocator report body (without pid/host) from this process's snapshot, and what it cost."""
    started = time.perf_counter()
    maps = summarize(torch.cuda.memory_snapshot(), max_segments)
    cost_ms = (time.perf_counter() - started) * 1000.0
    return {
        "version": MAP_VERSION,
        "reason": reason,
        "taken_ms": int(time.time() * 1000),
        "cost_ms": cost_ms,
        "maps": maps,
        "oom": oom,
    }


# --- out-of-memory capture -------------------------------------------------------------------

# Set by attach(capture_oom=True): called with the exception, sends a map before it propagates.
_on_oom = None
_hooks_lock = threading.Lock()


def is_oom(exc):
    """True for torch.cuda.OutOfMemoryError (and torch.OutOfMemoryError), without importing torch."""
    for cls in type(exc).__mro__:
        if cls.__name__ == "OutOfMemoryError" and cls.__module__.startswith("torch"):
            return True
    return False


def report_oom(exc):
    """Sends the map at this out-of-memory error once (a span and the excepthook may both see it)."""
    handler = _on_oom
    if handler is None or exc is None or not is_oom(exc) or getattr(exc, "_gpudash_reported", False):
        return
    try:
        exc._gpudash_reported = True
    except Exception:  # noqa: BLE001 - an exception without a __dict__: it may be sent twice, no more
        pass
    try:
        handler(exc)
    except Exception:  # noqa: BLE001 - the user's exception must propagate, not ours
        pass


class oom_guard:  # noqa: N801 - used like a function: `with gpudash.oom_guard(): ...`
    """Captures the allocator map when torch.cuda.OutOfMemoryError leaves the block, then lets it propagate."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        report_oom(exc)
        return False


def install_hooks():
    """Chains sys.excepthook and threading.excepthook (unless ours is already the one in place):
    an uncaught OOM is reported, then the previous hook runs as before."""
    with _hooks_lock:
        if not getattr(sys.excepthook, "_gpudash", False):
            previous = sys.excepthook

            def excepthook(exc_type, exc, tb):
                report_oom(exc)
                previous(exc_type, exc, tb)

            excepthook._gpudash = True
            sys.excepthook = excepthook
        if not getattr(threading.excepthook, "_gpudash", False):
            previous_thread = threading.excepthook

            def thread_excepthook(args):
                report_oom(args.exc_value)
                previous_thread(args)

            thread_excepthook._gpudash = True
            threading.excepthook = thread_excepthook
