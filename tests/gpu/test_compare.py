"""Tests of compare.py's verdict machinery, with simulated rounds, of the rules file (rules.json, rules.py) and of
the exit codes' reading (result.sh): no torch, no GPU.

    python3 -m pytest -q tests/gpu/test_compare.py

The simulated rounds follow what the H200 logs show (docs/runs/lab/, sessions 6 and 9): both sides of
a round move together with the round's state (clocks, the pinned core: 10% from round to round), and each
side has its own noise on top (3% for most rows). gpudash's figure is the reference's times a known gap.
Every simulation is seeded, so each test sees the same numbers on every run.
"""
import argparse
import json
import math
import os
import random
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare  # noqa: E402
import rules  # noqa: E402
from compare import Row, exit_code, paired_interval, print_table, t_975  # noqa: E402
from rules import RoundGroup, next_round  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
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
    # Up to the lab's max_rounds looks at the interval (rules.json): a gap two points inside or outside ±5% ends
    # on the wrong side under 4% of the time; a gap exactly on the limit ends on each side under 20% (a limit is
    # not a threshold: such a row is mostly INCONCLUSIVE).
    most = rules.load().script("lab")["max_rounds"]
    inside, outside, at = (outcomes(gap, seed=seed, max_rounds=most) for gap, seed in ((1.03, 4), (1.07, 5), (1.05, 6)))
    assert inside.get("FAIL", 0) < 0.04 and outside.get("PASS", 0) < 0.04, (inside, outside)
    assert at.get("PASS", 0) < 0.2 and at.get("FAIL", 0) < 0.2, at


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
    assert [exit_code(*counts) for counts in ((0, 0), (0, 3), (1, 0), (2, 5))] == [0, 2, 1, 1]


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
    assert tally.passed == 0 and tally.identical == 1
    row_lines = [line for line in out.splitlines() if line.strip().startswith("memory: pool used")]
    assert len(row_lines) == 1 and row_lines[0].endswith("EQUAL"), row_lines
    assert out.index("identity checks") < out.index(row_lines[0])
    assert exit_code(tally.failures, tally.inconclusive) == 0


def test_c_a_different_identity_row_fails(capsys):
    # 1.0 GiB against 1.0 GiB + 2 MiB: a 0.2% gap a ±5% comparison would have passed.
    tally = print_table([identity_row([(1.0, 1.0), (1.0, 1.0 + 2 / 1024)])], "identity")
    out = capsys.readouterr().out
    assert tally.passed == 0 and tally.identity_failed == 1
    assert "DIFFERENT" in out
    assert exit_code(tally.failures, tally.inconclusive) == 1


# ---- (d) tolerances ----

def test_d_a_tolerance_over_5_percent_needs_a_reason():
    with pytest.raises(ValueError, match="needs a reason"):
        Row("latency: event record (host)", "µs", "figure x", "ref", tolerance=0.10)
    with pytest.raises(ValueError, match="needs a reason"):
        Row("latency: event record (host)", "µs", "figure x", "ref", tolerance=0.06, reason="  ")
    Row("at the limit", "µs", "figure x", "ref", tolerance=0.05)
    Row("narrower", "µs", "figure x", "ref", tolerance=0.02)


def test_d_a_widened_tolerance_prints_its_reason(capsys):
    row = Row("wide", "µs", "figure x", "ref", tolerance=0.15, reason="the timer ticks at 1 µs")
    for i in range(2):
        row.add(1.0, 1.0, i)
    print_table([row], "widened")
    out = capsys.readouterr().out
    assert "±15% for wide: the timer ticks at 1 µs" in out


# ---- (e) the median interval: properties on simulated rounds ----

def bimodal_rounds(rng, gap, rounds, switch, slow=2.2):
    """Per-round (gpudash, reference) on a host that runs a call at one of two speeds (1 and `slow`) and switches
    between any two runs with probability `switch`, so some rounds pair a fast run with a slow one; 3% own noise."""
    speed, pairs = 1.0, []
    for r in range(rounds):
        figures = {}
        for side in (("gpudash", "ref") if r % 2 == 0 else ("ref", "gpudash")):
            if rng.random() < switch:
                speed = slow if speed == 1.0 else 1.0
            figures[side] = speed * math.exp(rng.gauss(0, NOISE)) * (gap if side == "gpudash" else 1.0)
        pairs.append((figures["gpudash"], figures["ref"]))
    return pairs


def judged(pairs, interval):
    row = Row("bimodal", "µs", "figure x", "ref", interval=interval, interval_reason="two speeds")
    for i, (m, t) in enumerate(pairs):
        row.add(m, t, i)
    return row.verdict().name


@pytest.mark.parametrize("switch, least_pass", [(0.05, 0.8), (0.1, 0.7), (0.2, 0.5), (0.3, 0.0)])
def test_e_on_bimodal_rounds_the_median_decides_a_ratio_of_1_and_never_passes_a_20_percent_gap(switch, least_pass):
    # 20 rounds at ±5%. At a true ratio of 1 it never FAILs, and it PASSes less often as mixed rounds grow (the
    # rest stays UNDECIDED); a 20% gap never PASSes, either way. The t-interval of such rounds is widened past
    # ±5% by the mixed rounds and rarely decides: what the median is for.
    rng = random.Random(int(switch * 100))
    at_one = [judged(bimodal_rounds(rng, 1.0, 20, switch), "median") for _ in range(TRIALS)]
    assert at_one.count("FAIL") == 0 and at_one.count("PASS") >= least_pass * TRIALS, (switch, at_one.count("PASS"))
    for gap in (1.2, 1 / 1.2):
        verdicts = [judged(bimodal_rounds(rng, gap, 20, switch), "median") for _ in range(TRIALS)]
        assert verdicts.count("PASS") == 0 and verdicts.count("FAIL") >= 0.85 * TRIALS, (switch, gap)
    if switch >= 0.2:
        assert sum(judged(bimodal_rounds(rng, 1.0, 20, switch), "t") == "PASS" for _ in range(TRIALS)) <= 0.1 * TRIALS


@pytest.mark.parametrize("n", [9, 20])
def test_e_the_median_interval_covers_the_true_ratio_95_percent_of_the_time(n):
    rng = random.Random(n)
    covered = 0
    for _ in range(2000):
        pairs = [simulated_round(rng, 1.1) for _ in range(n)]
        _, lo, hi = compare.median_interval(pairs)
        covered += lo <= 1.1 <= hi
    assert 0.93 <= covered / 2000 <= 0.99, covered / 2000


def test_e_the_median_never_passes_a_20_percent_gap_on_normal_noise():
    rng = random.Random(21)
    for gap in (1.2, 1 / 1.2):
        verdicts = [judged([simulated_round(rng, gap) for _ in range(20)], "median") for _ in range(TRIALS)]
        assert verdicts.count("PASS") == 0 and verdicts.count("FAIL") >= 0.95 * TRIALS, gap


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


# ---- (f) the rules file: versioned, checked, used ----

# The sha256 of tests/gpu/rules.json at each version. Any change of the file needs a new version (with its date
# and why) and its hash added here, so the version a log prints names the rules that judged it.
RULES_SHA256 = {1: "4c70e33d78ff7cd26ec52c4090104109a58e9518d77c4e5d348a1aeec1f1792a"}


def spoiled_rules(tmp_path, spoil):
    data = json.load(open(rules.PATH))
    spoil(data)
    (tmp_path / "rules.json").write_text(json.dumps(data))
    return str(tmp_path / "rules.json")


def test_f_the_rules_file_changes_only_with_a_version_bump(tmp_path):
    assert rules.version_problem(rules.load(), RULES_SHA256) is None, rules.version_problem(rules.load(), RULES_SHA256)
    changed = spoiled_rules(tmp_path, lambda d: d["rows"]["lab.pageable"].update(tolerance=0.04))
    assert "without a version bump" in rules.version_problem(rules.load(changed), RULES_SHA256)
    bumped = spoiled_rules(tmp_path, lambda d: d.update(version=d["version"] + 1))
    assert "has no sha256 in the table" in rules.version_problem(rules.load(bumped), RULES_SHA256)


@pytest.mark.parametrize("spoil, message", [
    (lambda d: d.pop("version"), "the file: missing 'version'"),
    (lambda d: d.update(version="1"), "version: must be an integer of at least 1"),
    (lambda d: d["rows"]["lab.pinned"].update(tolerance=5), "rows.lab.pinned: tolerance must be a fraction"),
    (lambda d: d.update(changed="5 December"), "changed: must be a date YYYY-MM-DD"),
    (lambda d: d.update(why=""), "why: must be a non-empty string"),
    (lambda d: d.update(extra=1), "the file: unknown key 'extra'"),
    (lambda d: d["rows"]["lab.pinned"].update(tolerance=0.10), "rows.lab.pinned: a tolerance of ±10% is wider than ±5%"),
    (lambda d: d["rows"]["lab.pinned"].update(interval="median"), "rows.lab.pinned: the median interval needs an"),
    (lambda d: d["rows"]["lab.pinned"].update(interval="mode"), "interval 'mode' is not one of t, median"),
    (lambda d: d["rows"]["lab.pinned"].update(tolerence=0.05), "rows.lab.pinned: unknown key 'tolerence'"),
    (lambda d: d["default"].update(tolerance=0.10), "default: a tolerance of ±10% is wider than ±5%"),
    (lambda d: d["scripts"]["lab"].update(deadline_s=330), "scripts.lab: deadline_s 330 + grace_s 60 + outside_s 60 is"),
    (lambda d: d["scripts"]["lab"].update(max_rounds=2), "scripts.lab.max_rounds: 2 is fewer than rounds (3)"),
])
def test_f_a_bad_rules_file_is_refused_saying_where_and_what(tmp_path, spoil, message):
    with pytest.raises(rules.RulesError, match=re.escape(message)):
        rules.load(spoiled_rules(tmp_path, spoil))


def test_f_an_unreadable_rules_file_or_a_missing_rule_is_refused(tmp_path, capsys):
    with pytest.raises(rules.RulesError, match="cannot read the rules file .*none.json"):
        rules.load(str(tmp_path / "none.json"))
    (tmp_path / "comma.json").write_text('{"version": 1,}')
    with pytest.raises(rules.RulesError, match="comma.json: not valid JSON: .* at line 1 column 15"):
        rules.load(str(tmp_path / "comma.json"))
    with pytest.raises(rules.RulesError, match="has no rule for 'lab.nothing'"):
        rules.load().row("lab.nothing")
    with pytest.raises(SystemExit) as e:  # a script without its rules fails (exit 1), saying why
        rules.load_or_exit(str(tmp_path / "none.json"))
    assert e.value.code == 1 and capsys.readouterr().out.startswith("FAIL: cannot read the rules file")


def test_f_the_scripts_ask_for_every_rule_and_all_sh_gives_each_schedule_its_timeout():
    asked = set()
    for name in ("lab_copies.py", "lab_vs_torch.py", "p2p_vs_torch.py", "collectives_vs_torch.py"):
        asked |= set(re.findall(r'"((?:lab|p2p|collectives)\.[a-z.]+)"', open(os.path.join(HERE, name)).read()))
    assert asked == set(rules.load().rows)
    text = open(os.path.join(HERE, "all.sh")).read()
    for name, s in rules.load().scripts.items():
        m = re.search(rf"part {name} (\d+) tests/gpu/{name}.sh", text)
        assert m and int(m.group(1)) == s["part_timeout_s"], (name, m and m.group(0))


def test_f_the_scripts_take_their_rounds_from_the_rules_and_say_when_overridden(monkeypatch):
    book, s = rules.load(), rules.load().script("lab")

    def parse(*argv):
        monkeypatch.setattr(sys, "argv", ["lab_vs_torch.py", *argv])
        ap = argparse.ArgumentParser()
        rules.round_arguments(ap, book, "lab", "rounds", "deadline")
        return rules.parse_round_arguments(ap, book, "lab")

    args = parse()
    assert (args.rounds, args.max_rounds, args.deadline_s) == (s["rounds"], s["max_rounds"], s["deadline_s"])
    assert args.rules_label == book.label == f"rules v{book.version} sha256 {book.sha256[:12]}"
    assert parse("--deadline-s", "100").rules_label == f"{book.label}, overridden: --deadline-s 100 (rules {s['deadline_s']})"
    with pytest.raises(SystemExit) as e:  # a usage error exits 1: argparse's 2 would read as INCONCLUSIVE
        parse("--rounds", "many")
    assert e.value.code == 1
    shell = subprocess.run([sys.executable, os.path.join(HERE, "rules.py"), "shell", "lab"], capture_output=True,
                           text=True, check=True).stdout
    assert f"RULES_LABEL='{book.label}'" in shell and f"RULES_DEADLINE_S={s['deadline_s']}" in shell


def test_f_runs_since_rules_lists_the_runs_under_the_current_rules(tmp_path):
    import runs_since_rules
    book = rules.load()
    logs = tmp_path / "docs" / "runs" / "lab"
    logs.mkdir(parents=True)
    assert runs_since_rules.runs(book, str(tmp_path)) == ([], [], [])
    line = ("lab vs PyTorch: 37 PASS, 0 FAIL/MISSING, 2 INCONCLUSIVE, 4 identity checks equal and 0 not, 0 failed "
            "checks or runs; 20 rounds in 290 s; exit 2 (INCONCLUSIVE: some rows could not be decided); ")
    (logs / "now.log").write_text(f"{line}{book.label}\n  [PASS] x\n{line}{book.label}\n")  # all.sh repeats it
    (logs / "by-hand.log").write_text(f"{line}{book.label}, overridden: --deadline-s 100 (rules 300)\n")
    (logs / "edited.log").write_text(f"{line}rules v{book.version} sha256 0123456789ab\n")
    (logs / "before.log").write_text(line[:-2] + "\n")  # no rules named: before rules v1
    gpu = tmp_path / "docs" / "runs" / "gpu"  # every area's logs are read
    gpu.mkdir()
    (gpu / "p2p.log").write_text(f"{line.replace('lab vs PyTorch', 'p2p', 1)}{book.label}\n")
    (tmp_path / "docs" / "runs" / "loose.log").write_text(f"{line}{book.label}\n")  # not in an area: not a run log
    under, marked, other = runs_since_rules.runs(book, str(tmp_path))
    assert [p for p, _ in under] == ["docs/runs/gpu/p2p.log", "docs/runs/lab/now.log"]
    assert runs_since_rules.text(under[1]) == ("  docs/runs/lab/now.log: lab vs PyTorch 37 PASS, 0 FAIL/MISSING, "
                                               "2 INCONCLUSIVE, exit 2")
    assert [p for p, _ in marked] == ["docs/runs/lab/by-hand.log"] and [p for p, _ in other] == ["docs/runs/lab/edited.log"]


# ---- (g) the exit codes, as result.sh reads them for all.sh and the scripts ----

SUMMARY_2 = "lab vs PyTorch: 37 PASS, 0 FAIL/MISSING, 2 INCONCLUSIVE; exit 2 (INCONCLUSIVE: some rows); rules v1\n\n"


@pytest.mark.parametrize("call, log, answer", [
    ("part_verdict 0", "", "PASS (100 s of 420)"),
    ("part_verdict 2", "== result: INCONCLUSIVE: rows the comparison could not decide\n", "INCONCLUSIVE (exit 2"),
    ("part_verdict 2", "tests/gpu/lab.sh: line 9: syntax error near unexpected token\n", "FAIL (exit 2 without an"),
    ("part_verdict 2", "python3: can't open file 'tests/gpu/lab_vs_torch.py'\n", "FAIL (exit 2 without an"),
    ("part_verdict 3", "\n== result: SKIPPED (one GPU: p2p needs two)\n", "SKIPPED (one GPU: p2p needs two)"),
    ("part_verdict 3", "SKIPPED: no PID namespace here\n", "SKIPPED (no PID namespace here)"),
    ("part_verdict 3", "", "FAIL (exit 3 without a SKIPPED line"),
    ("part_verdict 124", "", "FAIL (timed out after 420 s)"),
    ("part_verdict 1", "== result: INCONCLUSIVE\n", "FAIL (exit 1, 100 s)"),
    ("compare_status 2", "round 1\n" + SUMMARY_2, "inconclusive"),
    ("compare_status 2", SUMMARY_2 + "Traceback (most recent call last):\n", "fail"),
    ("compare_status 2", "usage: lab_vs_torch.py\n", "fail"),
    ("compare_status 0", "", "pass"),
    ("compare_status 124", SUMMARY_2, "fail"),
])
def test_g_an_exit_2_or_3_counts_only_with_its_verdict_line(tmp_path, call, log, answer):
    (tmp_path / "part.log").write_text(log)
    script = f'source "{HERE}/result.sh"; {call} "{tmp_path / "part.log"}" 420 100'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    assert out.startswith(answer), out
