"""The client's protocol, reconnects and never-raise behaviour, against a real
`gpudash --simulate` and a stand-in torch module."""

import logging
import os
import pwd
import time

import gpudash
import torch
from conftest import Server, free_port, mine, wait_for


def test_reports_allocated_and_reserved_as_torch_sees_them(server):
    attachment = gpudash.attach(server.url, interval=0.2)
    entry = wait_for(lambda: mine(server), what="the process in /api/bridge")
    device = entry["devices"][0]
    assert device["allocated"] == torch.cuda.memory_allocated(0) == 3 << 30
    assert device["reserved"] == 5 << 30
    assert device["uuid"] == "GPU-5140da5b-0000-4000-8000-000000000000"
    assert entry["torch_version"] == "2.11.0+fake" and entry["cuda_version"] == "13.0"
    assert entry["process_name"] and not entry["stale"]
    torch.cuda.state.allocated = 4 << 30
    wait_for(lambda: mine(server)["devices"][0]["allocated"] == 4 << 30, what="a new figure")
    assert attachment.stats()["reports"] >= 2 and attachment.stats()["failures"] == 0


def test_spans_are_timed_by_events_and_summarized(server):
    gpudash.attach(server.url, interval=0.2)

    @gpudash.monitor
    def step():
        torch.cuda.state.allocated += 1 << 20
        time.sleep(0.02)  # the step's work, not a wait

    walls = []
    for _ in range(5):
        started = time.perf_counter()
        step()
        walls.append((time.perf_counter() - started) * 1000)
    with gpudash.span("eval"):
        pass
    entry = wait_for(lambda: (m := mine(server)) and len(m["spans"]) == 2 and m, what="two span names")
    summary = {s["name"]: s for s in entry["spans"]}
    name = "test_spans_are_timed_by_events_and_summarized.<locals>.step"
    assert summary[name]["count"] == 5
    # Timed by its events, inside the call: at least the 20 ms the step slept, at most the call's wall time.
    assert 20 <= summary[name]["p50_ms"] <= max(walls) + 0.01, (summary[name], walls)
    assert summary[name]["last_memory_delta"] == 1 << 20
    assert summary["eval"]["count"] == 1
    assert len(entry["recent_spans"]) == 6


def test_spans_wait_for_their_events_without_blocking(server):
    """A span returns while the GPU is still busy and is reported once its end event completes.
    What a span costs the training loop is a benchmark (python/bench/span_cost.py), not asserted here."""
    gpudash.attach(server.url, interval=0.2)
    torch.cuda.state.event_delay_s = 1.5  # the GPU is "still busy" for a while
    with gpudash.span("slow"):
        pass
    events = torch.cuda.state.events
    assert len(events) == 2, "a start and an end event"
    assert torch.cuda.state.synchronize_calls == 0, "a span must not synchronize"
    assert not any(e.query() for e in events), "the span returned before its events completed"
    # Not a wait for a state: two report intervals in which the span must NOT be reported.
    time.sleep(0.4)
    assert not events[1].query(), "the GPU is still busy, so the check below means something"
    assert not (mine(server) or {"spans": []})["spans"], "not reported before its end event completes"
    entry = wait_for(lambda: (m := mine(server)) and m["spans"] and m, what="the span once its event completed")
    assert events[1].query() and torch.cuda.state.synchronize_calls == 0
    assert [s["name"] for s in entry["spans"]] == ["slow"]


def test_remote_empty_cache_needs_consent_then_releases_the_cache(server):
    gpudash.attach(server.url, interval=0.2)
    entry = wait_for(lambda: mine(server), what="attachment")
    status, body = server.post(f"/api/bridge/{entry['id']}/empty_cache")
    assert status == 409 and "allow_remote_empty_cache=True" in body["error"]
    assert torch.cuda.state.empty_cache_calls == 0

    gpudash.attach(server.url, interval=0.2, allow_remote_empty_cache=True)
    wait_for(lambda: mine(server)["allow_remote_empty_cache"], what="consent")
    status, body = server.post(f"/api/bridge/{entry['id']}/empty_cache")
    assert status == 202, body
    done = wait_for(lambda: (mine(server)["empty_cache"] or {}).get("done_ms") and mine(server), what="done")
    assert done["empty_cache"]["released_bytes"] == 2 << 30
    assert torch.cuda.state.empty_cache_calls == 1
    assert done["devices"][0]["reserved"] == torch.cuda.state.allocated


def test_reconnects_when_the_server_comes_back_and_never_raises():
    port = free_port()
    attachment = gpudash.attach(f"http://127.0.0.1:{port}", interval=0.1)
    wait_for(lambda: attachment.stats()["failures"] >= 2, what="failures while down")
    assert attachment.stats()["alive"]
    with gpudash.span("while-down"):
        pass
    server = Server(port=port)
    try:
        entry = wait_for(lambda: mine(server), seconds=40, what="a report after the server came back")
        assert entry["pid"] == os.getpid()
        wait_for(lambda: mine(server)["spans"], what="the span kept while the server was down")
    finally:
        server.stop()


def test_refusals_and_garbage_never_reach_the_training_loop():
    # An operator reports only for processes of its own name: this test's process runs as `me`.
    me = pwd.getpwuid(os.getuid()).pw_name
    server = Server(tokens=f"{me}:operator:ana-token-0123456789,vic:viewer:vic-token-0123456789")
    try:
        for token in ["wrong-token-0123456789", "vic-token-0123456789"]:
            attachment = gpudash.attach(server.url, token=token, interval=0.1)
            wait_for(lambda: attachment.stats()["failures"] >= 2, what="refused reports")
            assert attachment.stats()["alive"] and attachment.stats()["reports"] == 0
        gpudash.attach(server.url, token="ana-token-0123456789", interval=0.1)
        wait_for(lambda: mine(server, "ana-token-0123456789"), what="an operator's report")
    finally:
        server.stop()
    for url in ["http://[::1", "not a url", "http://127.0.0.1:1"]:
        attachment = gpudash.attach(url, interval=0.1)
        wait_for(lambda: attachment.stats()["failures"] >= 1, what=f"failure for {url}")
        assert attachment.stats()["alive"]


def test_without_a_server_spans_are_logged(caplog):
    gpudash.detach()
    caplog.set_level(logging.INFO, logger="gpudash")
    with gpudash.span("offline"):
        torch.cuda.state.allocated += 1024
    wait_for(lambda: "offline:" in caplog.text, what="the span in the log")
    assert "memory +1024 bytes" in caplog.text


def test_a_stale_process_is_kept_and_marked(server):
    attachment = gpudash.attach(server.url, interval=0.1)
    wait_for(lambda: mine(server), what="attachment")
    attachment.detach()
    entry = wait_for(lambda: (m := mine(server)) and m["stale"] and m, seconds=12, what="stale mark")
    assert entry["pid"] == os.getpid()
