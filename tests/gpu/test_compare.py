"""Tests of compare.py's verdict machinery, with simulated rounds: no torch, no GPU.

    python3 -m pytest -q tests/gpu/test_compare.py

The simulated rounds follow what the H200 logs show (docs/gpu-runs/session6 and session9): both sides of
a round move together with the round's state (clocks, the pinned core: 10% from round to round), and each
side has its own noise on top (3% for most rows). gpudash's figure is the reference's times a known gap.
Every simulation is seeded, so each test sees the same numbers on every run.
"""
import math
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare  # noqa: E402
from compare import Row, RoundGroup, exit_code, next_round, paired_interval, print_table, t_975  # noqa: E402

DRIFT = 0.10  # round-to-round movement shared by both sides of a round
NOISE = 0.03  # each side's own noise within a round
TRIALS = 300


def simulated_round(rng, gap, drift=DRIFT, noise=NOISE):
    """(gpudash, reference) of one round: a shared drift, each side's own noise, gpudash = gap × reference."""
    shared = math.exp(rng.gauss(0, drift))
    reference = 100 * shared * math.exp(rng.gauss(0, noise))
    return reference * gap * math.exp(rng.gauss(0, noise)), reference


def measured_row(rng, gap, rounds=3, max_rounds=15, noise=NOISE, tolerance=compare.TOLERANCE):
    """A row measured as the scripts do: `rounds` rounds, then more while it is undecided, up to `max_rounds`."""
    row = Row("simulated", "GB/s", "series sim", "simulated reference", tolerance=tolerance)
    for i in range(max_rounds):
        if i >= rounds and row.decided():
            break
        mine, theirs = simulated_round(rng, gap, noise=noise)
        row.add(mine, theirs, i)
    return row


def outcomes(gap, seed, noise=NOISE, rounds=3, max_rounds=15):
    """{verdict name: share of TRIALS} of rows with a true ratio `gap`."""
    rng = random.Random(seed)
    counts = {}
    for _ in range(TRIALS):
        name = measured_row(rng, gap, rounds, max_rounds, noise).verdict().name
        counts[name] = counts.get(name, 0) + 1
    return {name: n / TRIALS for name, n in counts.items()}


# ---- (a) the verdict decides, with a known gap ----

def test_a_15_percent_gap_fails_both_ways():
    slow, fast = outcomes(1 / 1.15, seed=1), outcomes(1.15, seed=2)
    assert slow.get("FAIL", 0) >= 0.98, slow
    assert fast.get("FAIL", 0) >= 0.98, fast
    assert slow.get("PASS", 0) == 0 and fast.get("PASS", 0) == 0


def test_a_no_gap_passes():
    shares = outcomes(1.0, seed=3)
    assert shares.get("PASS", 0) >= 0.95, shares
    assert shares.get("FAIL", 0) <= 0.01, shares


def test_a_gaps_two_points_from_the_limit_rarely_land_on_the_wrong_side():
    inside, outside = outcomes(1.03, seed=4), outcomes(1.07, seed=5)
    assert inside.get("FAIL", 0) < 0.04, inside
    assert outside.get("PASS", 0) < 0.04, outside


def test_a_three_rounds_of_pageable_like_noise_stay_undecided_not_pass():
    # Pageable copies: each side ±8% on its own, no shared drift worth the name; 3 rounds cannot judge ±5%.
    shares = outcomes(1.0, seed=6, noise=0.08, rounds=3, max_rounds=3)
    assert shares.get("UNDECIDED", 0) >= 0.9, shares
    assert shares.get("FAIL", 0) <= 0.02, shares


def test_a_pairing_removes_the_shared_drift():
    # 25% round-to-round drift on both sides, 0.5% of their own: the old band of unpaired quartiles spans
    # the drift and could not decide; the paired ratios agree within 1%, so 3 rounds PASS.
    rng = random.Random(7)
    row = Row("paired", "TFLOP/s", "figure sim", "simulated reference")
    for i in range(3):
        row.add(*simulated_round(rng, 1.0, drift=0.25, noise=0.005), i)
    v = row.verdict()
    assert v.name == "PASS", (v.lo, v.hi)
    assert v.rounds == 3


def test_a_interval_covers_the_true_ratio_95_percent_of_the_time():
    # The t factor matters most with few rounds: with 1.96 instead of 4.30, 3 rounds would cover ~80%.
    rng = random.Random(8)
    for n in (3, 10):
        covered = 0
        for _ in range(4000):
            pairs = [simulated_round(rng, 1.1) for _ in range(n)]
            _, lo, hi = paired_interval(pairs)
            covered += lo <= 1.1 <= hi
        assert 0.93 <= covered / 4000 <= 0.97, (n, covered / 4000)


def test_a_t_quantiles():
    assert t_975(1) == 12.706
    assert t_975(2) == 4.303
    assert t_975(14) == 2.145
    assert t_975(31) == pytest.approx(2.040, abs=0.001)
    assert t_975(10_000) == pytest.approx(1.960, abs=0.001)
    with pytest.raises(ValueError):
        t_975(0)


def test_a_one_round_is_undecided_and_a_missing_round_is_a_failure():
    row = Row("one round", "ms", "figure x", "ref")
    row.add(1.0, 1.0, 0)
    assert row.verdict().name == "UNDECIDED"
    assert not row.decided()
    row.add(None, 1.0, 1)
    row.add(1.0, 1.0, 2)
    assert row.verdict().name == "MISSING"
    assert row.decided()


# ---- (b) the exit code ----

def noisy_row(name):
    """A row with two rounds 20% apart: its interval crosses both limits."""
    row = Row(name, "µs", "figure x", "ref")
    row.add(1.0, 1.0, 0)
    row.add(1.2, 1.0, 1)
    return row


def test_b_a_run_of_inconclusive_rows_exits_2(capsys):
    rows = [noisy_row(f"row {i}") for i in range(4)]
    tally = print_table(rows, "all undecided")
    out = capsys.readouterr().out
    assert (tally.passed, tally.failed, tally.inconclusive) == (0, 0, 4)
    assert exit_code(tally.failures, tally.inconclusive) == 2
    assert out.count("INCONCLUSIVE") >= 4


def test_b_a_failure_wins_over_inconclusive(capsys):
    failing = Row("too slow", "GB/s", "series x", "ref")
    for i, (mine, theirs) in enumerate(((80, 100), (81, 100), (79, 100))):
        failing.add(mine, theirs, i)
    tally = print_table([failing, noisy_row("undecided")], "one fail, one undecided")
    capsys.readouterr()
    assert (tally.failed, tally.inconclusive) == (1, 1)
    assert exit_code(tally.failures, tally.inconclusive) == 1


def test_b_exit_code_rule():
    assert exit_code(0, 0) == 0
    assert exit_code(0, 3) == 2
    assert exit_code(1, 0) == 1
    assert exit_code(2, 5) == 1


# ---- (c) identity rows ----

def identity_row(values):
    row = Row("memory: pool used after the frees", "GiB", "memory step 'free 4 blocks' allocated", "memory_pool.c",
              identity=True)
    for i, (mine, theirs) in enumerate(values):
        row.add(mine, theirs, i)
    return row


def test_c_an_equal_identity_row_is_not_a_pass(capsys):
    tally = print_table([identity_row([(1.0, 1.0)] * 3)], "identity")
    out = capsys.readouterr().out
    assert tally.passed == 0
    assert tally.identical == 1
    row_lines = [line for line in out.splitlines() if line.strip().startswith("memory: pool used")]
    assert len(row_lines) == 1 and row_lines[0].endswith("EQUAL"), row_lines
    assert out.index("identity checks") < out.index(row_lines[0])
    assert exit_code(tally.failures, tally.inconclusive) == 0


def test_c_a_different_identity_row_fails(capsys):
    # 1.0 GiB against 1.0 GiB + 2 MiB: a 0.2% gap a ±5% comparison would have passed.
    tally = print_table([identity_row([(1.0, 1.0), (1.0, 1.0 + 2 / 1024)])], "identity")
    out = capsys.readouterr().out
    assert tally.passed == 0
    assert tally.identity_failed == 1
    assert "DIFFERENT" in out
    assert exit_code(tally.failures, tally.inconclusive) == 1


# ---- (d) tolerances ----

def test_d_a_tolerance_over_10_percent_needs_a_reason():
    with pytest.raises(ValueError, match="needs a reason"):
        Row("latency: event record (host)", "µs", "figure x", "ref", tolerance=0.16)
    with pytest.raises(ValueError, match="needs a reason"):
        Row("latency: event record (host)", "µs", "figure x", "ref", tolerance=0.11, reason="  ")
    Row("at the limit", "µs", "figure x", "ref", tolerance=0.10)


def test_d_a_widened_tolerance_prints_its_reason(capsys):
    row = Row("wide", "µs", "figure x", "ref", tolerance=0.15, reason="the timer ticks at 1 µs")
    row.add(1.0, 1.0, 0)
    row.add(1.0, 1.0, 1)
    print_table([row], "widened")
    out = capsys.readouterr().out
    assert "±15% for wide: the timer ticks at 1 µs" in out


# ---- (e) the median interval, for a host that runs at two speeds ----

def two_speed_rounds(rng, gap, rounds, stay=0.75):
    """Per-round (gpudash, reference) of a ~1 µs host call on a host that runs it at one of two speeds (0.9 and
    2.0 µs, docs/gpu-runs/session14-pool-modes.log) and keeps its speed from one run to the next with probability
    `stay` (0.75: a round's two runs differ in a quarter of the rounds, as 4 of session 13's 17 did); 3% own noise."""
    speed, pairs = 0.9, []
    for r in range(rounds):
        figures = {}
        for side in (("gpudash", "ref") if r % 2 == 0 else ("ref", "gpudash")):
            if rng.random() > stay:
                speed = 2.0 if speed == 0.9 else 0.9
            figures[side] = speed * math.exp(rng.gauss(0, NOISE)) * (gap if side == "gpudash" else 1.0)
        pairs.append((figures["gpudash"], figures["ref"]))
    return pairs


def judged(pairs, interval):
    row = Row("pool", "µs", "figure x", "ref", interval=interval, interval_reason="two speeds", tolerance=0.10)
    for i, (m, t) in enumerate(pairs):
        row.add(m, t, i)
    return row.verdict().name


def test_e_session_13s_pool_rounds_decide_by_the_median_and_not_by_t():
    # The 17 per-round ratios of the pool row in docs/gpu-runs/session13-lab.log (INCONCLUSIVE, t: 0.864–1.107).
    ratios = [1.524, 1.002, 0.494, 1.400, 1.126, 0.984, 0.975, 0.705, 0.979, 1.008, 0.949, 0.947, 1.016, 1.006,
              0.975, 1.030, 0.935]
    pairs = [(r, 1.0) for r in ratios]
    ratio, lo, hi = compare.median_interval(pairs)
    assert (round(ratio, 3), lo, hi) == (0.984, 0.949, 1.016)
    assert judged(pairs, "t") == "UNDECIDED"
    assert judged(pairs, "median") == "PASS"


def test_e_on_a_two_speed_host_the_median_decides_and_never_wrongly():
    rng = random.Random(14)
    outcomes = {gap: [judged(two_speed_rounds(rng, gap, 17), "median") for _ in range(TRIALS)]
                for gap in (1.0, 1.2, 0.8)}
    assert outcomes[1.0].count("FAIL") == 0 and outcomes[1.0].count("PASS") >= 0.75 * TRIALS, outcomes[1.0]
    for gap in (1.2, 0.8):  # a real 20% gap: never PASS, mostly FAIL
        assert outcomes[gap].count("PASS") == 0 and outcomes[gap].count("FAIL") >= 0.6 * TRIALS, outcomes[gap]
    # The t-interval on the same rounds almost never decides: the reason the pool row uses the median.
    t_pass = sum(judged(two_speed_rounds(rng, 1.0, 17), "t") == "PASS" for _ in range(TRIALS))
    assert t_pass <= 0.1 * TRIALS, t_pass


def test_e_the_median_interval_covers_the_true_ratio_95_percent_of_the_time():
    rng = random.Random(9)
    covered = 0
    for _ in range(2000):
        pairs = [simulated_round(rng, 1.0) for _ in range(9)]
        _, lo, hi = compare.median_interval(pairs)
        covered += lo <= 1.0 <= hi
    assert 0.93 <= covered / 2000 <= 0.99, covered / 2000


def test_e_the_median_interval_needs_six_rounds_and_a_reason(capsys):
    assert compare.median_interval([(1.0, 1.0)] * 5)[1:] == (None, None)
    assert compare.median_interval([(1.0, 1.0)] * 6)[1:] == (1.0, 1.0)
    with pytest.raises(ValueError, match="needs a reason"):
        Row("pool", "µs", "figure x", "ref", interval="median")
    with pytest.raises(ValueError, match="not one of"):
        Row("pool", "µs", "figure x", "ref", interval="mode", interval_reason="x")
    row = Row("pool", "µs", "figure x", "ref", interval="median", interval_reason="the host has two speeds")
    for i in range(6):
        row.add(1.0, 1.0, i)
    print_table([row], "median")
    out = capsys.readouterr().out
    assert "pool: the host has two speeds" in out and "(median ratio, sign-test interval)" in out


# ---- the rounds: which groups the next round measures ----

def group(name, seconds, undecided):
    """A RoundGroup whose one row is undecided (two rounds 20% apart) or passed (two equal rounds)."""
    row = Row(name, "ms", "figure x", "ref")
    row.add(1.0, 1.0, 0)
    row.add(1.2 if undecided else 1.0, 1.0, 1)
    g = RoundGroup(name, {"row": row})
    g.round_seconds = [seconds, seconds]
    return g


def test_rounds_first_two_always_measure_every_group():
    groups = [group("slow", 100, False), group("fast", 1, False)]
    assert next_round(groups, 0, 3, 9, deadline_s=10, elapsed=500)[0] == groups
    assert next_round(groups, 1, 3, 9, deadline_s=10, elapsed=500)[0] == groups


def test_rounds_after_rounds_only_undecided_groups_that_fit():
    decided, undecided_slow, undecided_fast = group("a", 5, False), group("b", 20, True), group("c", 1, True)
    groups = [decided, undecided_slow, undecided_fast]
    # Within --rounds every group runs while it fits.
    assert next_round(groups, 2, 3, 9, deadline_s=100, elapsed=0)[0] == groups
    # After --rounds: only the undecided ones; the slow one no longer fits, the fast one does.
    assert next_round(groups, 3, 3, 9, deadline_s=100, elapsed=50)[0] == [undecided_slow, undecided_fast]
    assert next_round(groups, 3, 3, 9, deadline_s=100, elapsed=90)[0] == [undecided_fast]
    todo, why = next_round(groups, 3, 3, 9, deadline_s=100, elapsed=99.5)
    assert todo == [] and "deadline" in why


def test_rounds_stop_when_decided_or_at_max_rounds():
    done = [group("a", 1, False)]
    todo, why = next_round(done, 3, 3, 9, deadline_s=100, elapsed=0)
    assert todo == [] and why == "every row is decided"
    open_ = [group("b", 1, True)]
    assert next_round(open_, 8, 3, 9, deadline_s=100, elapsed=0)[0] == open_
    todo, why = next_round(open_, 9, 3, 9, deadline_s=100, elapsed=0)
    assert todo == [] and "--max-rounds 9" in why


def test_interleaved_rounds_alternate_the_first_side_and_stop_when_decided(monkeypatch, capsys):
    calls = []
    run = {"status": "succeeded", "result": {"checks": [{"name": "copied", "passed": True, "detail": ""}]}}

    def bench(binary, device, kind, params, timeout, cpu=None):
        calls.append(("gpudash", binary, device, kind, timeout))
        return run, 0.0, []

    monkeypatch.setattr(compare, "run_bench", bench)
    row = Row("simulated", "ms", "figure sim", "simulated reference")
    group = RoundGroup("sim", {"sim": row})
    args = type("Args", (), {"binary": "gpudash", "rounds": 3, "max_rounds": 9, "deadline_s": 100})()
    log = compare.CheckLog()

    def reference():
        calls.append(("reference",))
        return 10.0

    def finish(mine, theirs, index, elapsed):
        row.add(mine, theirs, index)
        return f"round {index + 1}: {mine}/{theirs}"

    rounds, last = compare.interleaved_rounds(args, group, log, ("sim", {}, 60), lambda r: 10.0 if r else None,
                                              reference, finish, lambda: calls.append(("sync",)))
    # Equal figures decide the row (PASS) once --rounds is reached: no extra round.
    assert (rounds, last) == (3, run) and row.verdict().name == "PASS"
    gpudash = ("gpudash", "gpudash", 0, "sim", 60)
    assert calls == [("sync",), gpudash, ("reference",), ("reference",), ("sync",), gpudash,
                     ("sync",), gpudash, ("reference",)]
    out = capsys.readouterr().out.splitlines()
    assert out == ["round 1: 10.0/10.0", "round 2: 10.0/10.0", "round 3: 10.0/10.0",
                   "stopping after 3 rounds: every row is decided"]
    assert log.report() == 0
