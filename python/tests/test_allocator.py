"""No trace, the allocator map and out-of-memory capture, with a stand-in torch
(and a real `gpudash --simulate` where the server's side matters)."""

import json
import os
import sys
import threading

import gpudash
import pytest
import torch
from conftest import mine, wait_for
from gpudash import _allocator, _spans

GIB = 1 << 30
OOM_MESSAGE = ("CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 139.80 GiB of which "
               "600.00 MiB is free. Process 4242 has 139.2 GiB memory in use.")


def segment(size, blocks, device=0, kind="large", stream=0):
    """A memory_snapshot() segment; `blocks` is [(size, state)]; it carries an address and frames, as torch's do."""
    active = sum(b for b, state in blocks if state != "inactive")
    allocated = sum(b for b, state in blocks if state == "active_allocated")
    return {
        "device": device, "address": 0x7F0000000000 + size, "total_size": size, "allocated_size": allocated,
        "active_size": active, "requested_size": allocated, "stream": stream, "segment_type": kind,
        "segment_pool_id": (0, 0), "is_expandable": False, "frames": [{"filename": "secret.py", "line": 1}],
        "blocks": [{"address": 1, "size": b, "requested_size": b, "state": state,
                    "frames": [{"filename": "train.py", "line": 7, "name": "forward"}]} for b, state in blocks],
    }


def fragmented():
    """4 GiB reserved, 1.25 GiB allocated, 2 GiB free in segments (two free 512 MiB blocks, four of 256 MiB)."""
    half, quarter = 512 << 20, 256 << 20
    return [
        segment(GIB, [(half, "active_allocated"), (half, "inactive")]),
        segment(GIB, [(quarter, "active_allocated"), (quarter, "inactive")] * 2),
        segment(GIB, [(quarter, "inactive"), (quarter, "active_allocated"), (half, "inactive")]),
        segment(GIB, [(quarter, "inactive"), (3 * quarter, "active_pending_free")]),
    ]


def recorded_spans():
    records = []
    _spans._sink = records.append
    return records


def resolved(records, count):
    def ready():
        records.extend(_spans.resolve_ready())
        return len(records) >= count

    wait_for(ready, what=f"{count} spans")
    return records


def test_spans_reset_nothing_and_bound_the_peak_they_did_not_raise():
    records = recorded_spans()
    state = torch.cuda.state
    state.allocated = 6 * GIB  # an earlier step's peak...
    state.allocated = 3 * GIB
    peak_before = torch.cuda.max_memory_allocated()

    @gpudash.monitor
    def small_step():
        state.allocated += GIB
        state.allocated -= GIB

    small_step()
    with gpudash.span("big"):
        state.allocated = 7 * GIB
        state.allocated = 3 * GIB
    resolved(records, 2)
    assert torch.cuda.max_memory_allocated() == 7 * GIB, "the user's peak counter moved only by their own work"
    assert peak_before == 6 * GIB
    forbidden = [c for c in state.calls if c.startswith(("reset", "set_", "_set", "_record", "empty_cache",
                                                         "synchronize"))]
    assert forbidden == [], f"a span changed the process: {forbidden}"
    small, big = records
    assert (small["memory_peak"], small["peak_bound"]) == (6 * GIB, True), "≤ the process peak it did not raise"
    assert (big["memory_peak"], big["peak_bound"]) == (7 * GIB, False), "it raised the peak: exact"


def test_exact_peak_resets_when_asked_and_says_so():
    records = recorded_spans()
    state = torch.cuda.state
    state.allocated = 6 * GIB
    state.allocated = 3 * GIB
    with gpudash.span("exact", exact_peak=True):
        state.allocated = 4 * GIB
        state.allocated = 3 * GIB
    resolved(records, 1)
    assert "reset_peak_memory_stats" in state.calls
    assert (records[0]["memory_peak"], records[0]["peak_bound"]) == (4 * GIB, False)
    assert torch.cuda.max_memory_allocated() == 4 * GIB, "documented: exact_peak resets the user's counter"


def test_the_summary_of_50000_blocks_is_bounded_and_address_free():
    # 2,500 segments of 20 blocks: every other block free, of sizes over several powers of two.
    segments = []
    for i in range(2_500):
        blocks = [((1 << (12 + (i + j) % 10)), "inactive" if j % 2 else "active_allocated") for j in range(20)]
        segments.append(segment(sum(b for b, _ in blocks), blocks, kind="small" if i % 3 else "large"))
    maps = _allocator.summarize({"segments": segments})
    assert len(maps) == 1
    m = maps[0]
    assert len(m["segments"]) == _allocator.MAX_SEGMENTS
    assert m["other"]["segments"] == 2_500 - _allocator.MAX_SEGMENTS
    sizes = [s["size"] for s in m["segments"]]
    assert sizes == sorted(sizes, reverse=True), "the largest are listed"
    t = m["totals"]
    assert t["blocks"] == 50_000 and t["segments"] == 2_500
    assert t["reserved"] == sum(s["total_size"] for s in segments)
    assert t["allocated"] == sum(s["allocated_size"] for s in segments)
    free = [b["size"] for s in segments for b in s["blocks"] if b["state"] == "inactive"]
    assert t["free_in_segments"] == sum(free) and t["largest_free_block"] == max(free)
    assert sum(b["count"] for b in m["free_histogram"]) == len(free)
    assert all(b["count"] * (1 << b["log2"]) <= b["bytes"] < b["count"] * (2 << b["log2"]) for b in m["free_histogram"])
    text = json.dumps(maps)
    assert len(text) < 128 * 1024, f"{len(text)} bytes for 50,000 blocks"
    assert "address" not in text and "frames" not in text and "train.py" not in text


def test_the_requested_size_is_read_from_the_message():
    assert _allocator.requested_bytes(OOM_MESSAGE) == round(1.5 * GIB)
    assert _allocator.requested_bytes("Tried to allocate 2.10 GiB. GPU 0") == round(2.10 * GIB)
    assert _allocator.requested_bytes("Tried to allocate 20.00 MiB;") == 20 << 20
    assert _allocator.requested_bytes("Tried to allocate 512 bytes") == 512
    assert _allocator.requested_bytes("out of memory") is None


def test_the_map_reaches_the_page_with_the_jobs_own_totals(server):
    torch.cuda.state.segments = fragmented()
    gpudash.attach(server.url, interval=0.2, share_allocator_map=True, map_interval=0.5)
    entry = wait_for(lambda: (m := mine(server)) and m["allocator"] and m, what="a map in /api/bridge")
    assert entry["share_allocator_map"]
    assert not entry["allocator"]["maps"][0].get("segments"), "the list carries totals; segments come per process"
    device = server.get(f"/api/bridge/{entry['id']}")["allocator"]["maps"][0]
    # What the job computes from its own memory_snapshot(), byte for byte.
    assert device["totals"] == {"reserved": 4 * GIB, "allocated": 1280 << 20, "active": 2 * GIB,
                                "free_in_segments": 2 * GIB, "largest_free_block": 512 << 20, "segments": 4,
                                "blocks": 11}
    assert device["free_histogram"] == [{"log2": 28, "count": 4, "bytes": GIB}, {"log2": 29, "count": 2, "bytes": GIB}]
    assert [s["allocated"] for s in device["segments"]] == [s["allocated_size"] for s in fragmented()]
    forbidden = [c for c in torch.cuda.state.calls if c.startswith(("reset", "set_", "_record", "empty_cache"))]
    assert forbidden == []


def test_refresh_map_asks_the_process_for_one_now(server):
    torch.cuda.state.segments = fragmented()
    # A map every hour: only the page's request can bring a second one soon.
    attachment = gpudash.attach(server.url, interval=0.2, share_allocator_map=True, map_interval=3600)
    entry = wait_for(lambda: (m := mine(server)) and m["allocator"] and m, what="the first map")
    first = entry["allocator"]["taken_ms"]
    torch.cuda.state.segments = fragmented()[:2]
    status, body = server.post(f"/api/bridge/{entry['id']}/allocator_map")
    assert status == 202, body
    done = wait_for(lambda: (m := mine(server))["map_request"]["done_ms"] and m, what="the requested map")
    assert done["allocator"]["reason"] == "requested" and done["allocator"]["taken_ms"] > first
    assert done["allocator"]["maps"][0]["totals"]["segments"] == 2
    assert attachment.stats()["maps_sent"] == 2


def test_a_process_that_does_not_share_cannot_be_asked(server):
    gpudash.attach(server.url, interval=0.2)
    entry = wait_for(lambda: mine(server), what="attachment")
    status, body = server.post(f"/api/bridge/{entry['id']}/allocator_map")
    assert status == 409 and "share_allocator_map=True" in body["error"]
    assert entry["allocator"] is None and "memory_snapshot" not in torch.cuda.state.calls


def test_an_oom_is_on_the_server_before_it_propagates_and_alerts(server):
    torch.cuda.state.segments = fragmented()
    gpudash.attach(server.url, interval=0.2, share_allocator_map=True, map_interval=3600)
    wait_for(lambda: (m := mine(server)) and m["allocator"], what="attached with a map")
    seen = None
    try:
        with gpudash.span("step"):
            raise torch.cuda.OutOfMemoryError(OOM_MESSAGE)
    except torch.cuda.OutOfMemoryError:
        # No waiting: the report was sent before the exception left the span.
        seen = mine(server)
    assert seen is not None and len(seen["ooms"]) == 1, "the OOM reached the server before the except block ran"
    oom = seen["ooms"][0]
    assert oom["requested_bytes"] == round(1.5 * GIB) and oom["device"] == 0
    assert oom["totals"]["largest_free_block"] == 512 << 20
    assert seen["allocator"]["reason"] == "oom"
    alert = wait_for(lambda: next((a for a in server.get("/api/alerts")["alerts"] if a["rule"] == "oom"), None),
                     what="an oom alert")
    assert alert["severity"] == "critical" and alert["pid"] == os.getpid() and alert.get("resolved_ms") is None
    assert "asked for 1.50 GiB, largest free block 512 MiB, 2.00 GiB free in total (fragmented)" in alert["message"]


# The thread's error also reaches pytest's own hook: the chained hooks still run.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_oom_outside_spans_is_caught_by_the_guard_and_the_excepthooks(server):
    torch.cuda.state.segments = fragmented()
    attachment = gpudash.attach(server.url, interval=0.2, share_allocator_map=True, map_interval=3600)
    wait_for(lambda: (m := mine(server)) and m["allocator"], what="attached with a map")
    try:
        with gpudash.oom_guard():
            raise torch.cuda.OutOfMemoryError("Tried to allocate 1.00 GiB")
    except torch.cuda.OutOfMemoryError as error:
        assert len(mine(server)["ooms"]) == 1
        sys.excepthook(type(error), error, None)  # the same error reaching the top: not sent twice
    assert attachment.stats()["ooms_sent"] == 1

    def worker():
        raise torch.cuda.OutOfMemoryError("Tried to allocate 3.00 GiB")

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    ooms = mine(server)["ooms"]
    assert [o["requested_bytes"] for o in ooms] == [GIB, 3 * GIB], "an uncaught OOM in a thread, via threading.excepthook"
    try:
        raise torch.cuda.OutOfMemoryError("Tried to allocate 5.00 GiB")
    except torch.cuda.OutOfMemoryError as error:
        sys.excepthook(type(error), error, None)
    assert mine(server)["ooms"][-1]["requested_bytes"] == 5 * GIB
    # Other errors are none of the client's business.
    try:
        with gpudash.span("x"):
            raise ValueError("Tried to allocate 1.00 GiB")
    except ValueError:
        pass
    assert attachment.stats()["ooms_sent"] == 3


def test_without_capture_an_oom_is_not_sent(server):
    attachment = gpudash.attach(server.url, interval=0.2, share_allocator_map=True, capture_oom=False)
    wait_for(lambda: mine(server), what="attached")
    try:
        with gpudash.span("step"):
            raise torch.cuda.OutOfMemoryError(OOM_MESSAGE)
    except torch.cuda.OutOfMemoryError:
        pass
    assert attachment.stats()["ooms_sent"] == 0 and mine(server)["ooms"] == []
