"""Shared by lab_vs_torch.py, p2p_vs_torch.py and collectives_vs_torch.py: running `gpudash bench`, reading its
JSON defensively, the verdict over paired rounds, the round loop of one group, the table, and the exit code.
What judges a row (its tolerance and interval) and how long a script measures come from tests/gpu/rules.json
(rules.py loads it; every run prints its version and sha256 at the top and in its summary line).

Paired rounds. Each round measures gpudash and the reference back to back (the side that goes first
alternates), and each side gives one figure per round (the median of that round's timed repetitions).
Round i of both sides shares that round's state of the machine (clocks, the pinned core's caches, what else
ran), so the verdict is built on the per-round log-ratios d_i = ln(gpudash_i / reference_i), not on the two
sides' spreads apart (an unpaired quartile band over three rounds left a real 15% gap INCONCLUSIVE 38% of the
time at 10% round-to-round noise).

The t-interval (interval "t"). A 95% Student t-interval on the mean of d_i, mean ± t(0.975, n-1) · sd / √n,
printed as ratios (exp of the bounds). Not a bootstrap: a row has 2 to ~24 rounds, and a percentile bootstrap
of so few values covers the truth well under 95% (at n = 3 it is the range of the three values: 75%), while
the t-interval is exact for normal log-ratios and widens with few rounds (t = 4.30 at n = 3), so few rounds
read UNDECIDED rather than falsely decided. The log makes "too slow" and "too fast" symmetric. Each extra
round looks at the interval again; test_compare.py simulates what that costs near a limit.

The median interval (interval "median", only with a reason in the rules file): the median of the per-round
ratios and its distribution-free 95% interval (median_interval: the sign test's order statistics; 6 rounds at
least). It is for rounds of which a few are wild on either side (a host that runs a ~1 µs call at two speeds
and switches between a round's two runs): they widen a t-interval past any tolerance, while they move the
median's interval by a few order statistics. On normal noise it needs more rounds than t; no row of rules v1
uses it.

The verdict of a compared row, with its tolerance (a tolerance above ±5% needs a reason, printed):

    PASS          the whole interval lies inside [1 - tolerance, 1 + tolerance];
    FAIL          the whole interval lies outside it, on either side (gpudash too slow or too fast);
    UNDECIDED     the interval crosses a limit (or fewer than 2 rounds): the scripts measure more rounds
                  of that row's group, up to --max-rounds or the deadline;
    INCONCLUSIVE  still UNDECIDED after the last round: never a PASS; the run exits 2;
    MISSING       a figure gpudash or the reference did not produce in some round: counted as a failure.
A limit is not a threshold: a gpudash exactly at a limit has an interval around it and ends INCONCLUSIVE, or
on either side of it; only an interval wholly outside the band FAILs.

Identity rows read the same value on both sides (e.g. the same driver attribute of the same pool after the
same steps): equal or not is all they can say, so they are printed apart, never counted as PASS; a
difference is a failure. Rows with judged=False are printed for information only.

The exit code (exit_code): 1 on any failure (FAIL, MISSING, a different identity row, a failed gpudash
check, whatever else the script counts), else 2 when any row is INCONCLUSIVE, else 0. The summary line of an
INCONCLUSIVE run ends "exit 2 (INCONCLUSIVE: ...); rules v..": the shell scripts count an exit 2 as
INCONCLUSIVE only with that line (python itself exits 2 when it cannot open a script).
"""
import json
import math
import os
import statistics
import subprocess
import time

import rules

# A row's tolerance when it is given none (CI's simulated rows); above it, a row needs a reason, printed.
TOLERANCE = rules.BASE_TOLERANCE
LEVEL = 0.95

# t(0.975, df) for df = 1..30: the two-sided 95% Student t quantile (any statistics table).
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_975(df):
    """The 97.5% quantile of Student's t with `df` degrees of freedom (the 95% two-sided interval's factor).

    The table up to 30; beyond it the Cornish-Fisher expansion around the normal quantile, which gives
    2.0423 at df = 30 (table: 2.042) and tends to 1.960."""
    if df < 1:
        raise ValueError(f"a t-interval needs at least 1 degree of freedom, got {df}")
    if df <= len(T_975):
        return T_975[df - 1]
    z = 1.959964
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def paired_interval(pairs):
    """(ratio, lo, hi) of gpudash / reference over paired rounds [(gpudash, reference), ...]: the geometric
    mean of the per-round ratios and its 95% t-interval (see the module's docstring). lo and hi are None
    with fewer than 2 pairs: one round has no spread to judge by."""
    logs = [math.log(mine / theirs) for mine, theirs in pairs]
    if not logs:
        return None, None, None
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), None, None
    half = t_975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def median_interval(pairs):
    """(ratio, lo, hi) of gpudash / reference over paired rounds, robust to rounds in which one side alone was
    caught by a slow stretch of the host: the median of the per-round ratios and its distribution-free 95%
    interval, the order statistics k and n+1-k of the sorted ratios, with k the largest for which
    P(Binomial(n, 1/2) < k) <= 2.5% (the sign test's interval; it needs no normal noise, and a few wild rounds
    move it by at most a few order statistics). lo and hi are None under 6 pairs, where no such k exists."""
    ratios = sorted(mine / theirs for mine, theirs in pairs)
    if not ratios:
        return None, None, None
    n, k, below = len(ratios), 0, 0.0
    for i in range(n + 1):
        p = math.comb(n, i) / 2 ** n
        if below + p > (1 - LEVEL) / 2:
            break
        below, k = below + p, i + 1
    median = statistics.median(ratios)
    if k < 1:
        return median, None, None
    return median, ratios[k - 1], ratios[n - k]


INTERVALS = {"t": paired_interval, "median": median_interval}
assert tuple(INTERVALS) == rules.INTERVAL_KINDS, "rules.py and compare.py name different interval kinds"


def exit_code(failures, inconclusive):
    """The comparison's exit status: 1 when anything failed (FAIL or MISSING rows, different identity rows,
    failed gpudash checks, topology mismatches: the caller adds them up), else 2 when any row stayed
    INCONCLUSIVE (the run could not decide), else 0. A failure wins over INCONCLUSIVE: it is a finding."""
    if failures:
        return 1
    if inconclusive:
        return 2
    return 0


EXIT_MEANING = {0: "every row decided and passed", 1: "FAIL", 2: "INCONCLUSIVE: some rows could not be decided"}


class Verdict:
    """A row's verdict: `name` (PASS, FAIL, UNDECIDED, MISSING, EQUAL, DIFFERENT, info), the ratio (geometric
    mean of the paired rounds), its 95% interval lo–hi (None when it has none) and the rounds it used."""

    def __init__(self, name, ratio=None, lo=None, hi=None, rounds=0):
        self.name, self.ratio, self.lo, self.hi, self.rounds = name, ratio, lo, hi, rounds


class Row:
    """One compared figure: the paired per-round values of both sides, and how it is judged.

    tolerance  the relative limit of PASS and FAIL (default ±5%); above it only with `reason`, a sentence
               printed under the table (ValueError otherwise: a wide limit passes anything). The scripts
               take tolerance, reason, interval and interval_reason from the rules file (Rules.row).
    identity   both sides read the same value (the same driver attribute after the same steps): judged
               equal or different, printed apart, never counted as PASS.
    interval   "t" (default): the geometric mean of the per-round ratios and its t-interval; "median": the
               median ratio and its distribution-free interval (median_interval), only with
               `interval_reason`, a sentence printed with the table (ValueError otherwise).
    judged     False: printed for information (with `note`), never counted.
    """

    def __init__(self, figure, unit, gpudash_name, reference_name, judged=True, tolerance=TOLERANCE, reason="",
                 note="", identity=False, interval="t", interval_reason=""):
        if interval not in INTERVALS:
            raise ValueError(f"row '{figure}': interval {interval!r} is not one of {', '.join(INTERVALS)}")
        if interval != "t" and not interval_reason.strip():
            raise ValueError(f"row '{figure}': the {interval} interval needs a reason, printed with the table")
        if not 0 < tolerance < 1:
            raise ValueError(f"row '{figure}': tolerance {tolerance!r} is not a fraction between 0 and 1")
        if tolerance > TOLERANCE and not reason.strip():
            raise ValueError(f"row '{figure}': a tolerance of ±{tolerance:.0%} is wider than "
                             f"±{TOLERANCE:.0%} and needs a reason, printed with the table")
        self.figure, self.unit = figure, unit
        self.gpudash_name, self.reference_name = gpudash_name, reference_name
        self.judged, self.tolerance, self.reason = judged, tolerance, reason
        self.note, self.identity = note, identity
        self.interval, self.interval_reason = interval, interval_reason
        self.mine, self.theirs = [], []  # every valid figure of each side, for the table's medians
        self.pairs = []  # (round number, gpudash, reference) of the rounds where both sides gave a figure
        self.missing = []

    def add(self, mine, theirs, round_index):
        """Adds one round; a None on either side is remembered as MISSING in that round."""
        ok_mine = isinstance(mine, (int, float)) and mine > 0
        ok_theirs = isinstance(theirs, (int, float)) and theirs > 0
        if mine is None:
            self.missing.append(f"round {round_index + 1}: gpudash has no {self.gpudash_name}")
        elif ok_mine:
            self.mine.append(float(mine))
        else:
            self.missing.append(f"round {round_index + 1}: gpudash's {self.gpudash_name} is {mine!r}")
        if theirs is None:
            if self.reference_name != "none":
                self.missing.append(f"round {round_index + 1}: no reference figure")
        elif ok_theirs:
            self.theirs.append(float(theirs))
        else:
            self.missing.append(f"round {round_index + 1}: reference figure is {theirs!r}")
        if ok_mine and ok_theirs:
            self.pairs.append((round_index + 1, float(mine), float(theirs)))

    def verdict(self):
        """The row's Verdict from the rounds so far (see the module's docstring)."""
        pairs = [(m, t) for _, m, t in self.pairs]
        ratio, lo, hi = INTERVALS[self.interval](pairs)
        rounds = len(pairs)
        if not self.judged:
            return Verdict("info", ratio, lo, hi, rounds)
        if self.missing or not pairs:
            # Some rounds lacked the figure: a gap is a failure, even when other rounds had it.
            return Verdict("MISSING", ratio, lo, hi, rounds)
        if self.identity:
            return Verdict("EQUAL" if all(m == t for m, t in pairs) else "DIFFERENT", ratio, None, None, rounds)
        if lo is None:
            return Verdict("UNDECIDED", ratio, lo, hi, rounds)
        if 1 - self.tolerance <= lo and hi <= 1 + self.tolerance:
            return Verdict("PASS", ratio, lo, hi, rounds)
        if hi < 1 - self.tolerance or lo > 1 + self.tolerance:
            return Verdict("FAIL", ratio, lo, hi, rounds)
        return Verdict("UNDECIDED", ratio, lo, hi, rounds)

    def decided(self):
        """Whether more rounds cannot change the row's outcome: everything but UNDECIDED (a MISSING round stays
        missing, an identity row or an info row has nothing to narrow)."""
        return self.verdict().name != "UNDECIDED"


class Tally:
    """The table's counts: compared rows PASS / failed (FAIL, MISSING) / INCONCLUSIVE; identity rows equal /
    failed (DIFFERENT, MISSING); info rows. `failures` is what exit_code counts from the rows."""

    def __init__(self):
        self.passed = self.failed = self.inconclusive = 0
        self.identical = self.identity_failed = self.info = 0

    @property
    def failures(self):
        return self.failed + self.identity_failed


def print_table(rows, title, reference_label="PyTorch"):
    """Prints the compared rows, the tolerance reasons, the identity rows and the non-PASS rows' rounds;
    returns a Tally. A row still UNDECIDED here is INCONCLUSIVE: the rounds are over."""
    compared = [r for r in rows if not r.identity]
    identities = [r for r in rows if r.identity]
    tally = Tally()
    print(f"\n== {title}")
    print(f"ratio = geometric mean of the per-round ratios gpudash / reference (each round measures both back to "
          f"back); interval = its {LEVEL:.0%} t-interval over the rounds (a row marked 'median ratio': the median and "
          "its sign-test interval); PASS: interval inside 1±tol; FAIL: wholly outside; INCONCLUSIVE: still crossing "
          "a limit after the last round (exit 2)")
    width = max([len(r.figure) for r in rows] + [6])
    print(f"{'figure':<{width}}  {'unit':<7} {'gpudash':>10} {reference_label:>10} {'ratio':>7}  "
          f"{'95% interval':<13} {'tol':>5} {'rounds':>6}  verdict")
    details = []
    for r in compared:
        v = r.verdict()
        name = "INCONCLUSIVE" if v.name == "UNDECIDED" else v.name
        tol = f"±{r.tolerance * 100:.0f}%" if r.judged else "-"
        print(f"{r.figure:<{width}}  {r.unit:<7} {median_text(r.mine)} {median_text(r.theirs)} "
              f"{ratio_text(v.ratio)}  {interval_text(v):<13} {tol:>5} {v.rounds:>6}  {name}"
              f"{' (median ratio, sign-test interval)' if r.interval == 'median' else ''}")
        if name == "PASS":
            tally.passed += 1
        elif name in ("FAIL", "MISSING"):
            tally.failed += 1
        elif name == "INCONCLUSIVE":
            tally.inconclusive += 1
        else:
            tally.info += 1
        if name != "PASS":
            details.append(detail_line(r, name))
    widened = {}  # (tolerance, reason) -> figures: rows sharing a reason print it once
    for r in compared:
        if r.tolerance != TOLERANCE:
            widened.setdefault((r.tolerance, r.reason or "no reason given"), []).append(r.figure)
    if widened:
        print(f"\ntolerances other than ±{TOLERANCE:.0%}, and why:")
        for (tolerance, reason), figures in widened.items():
            print(f"  ±{tolerance:.0%} for {'; '.join(figures)}: {reason}")
    medians = {}  # reason -> figures
    for r in compared:
        if r.interval == "median":
            medians.setdefault(r.interval_reason, []).append(r.figure)
    if medians:
        print("\nrows judged by the median ratio and its distribution-free 95% interval (sign test), and why:")
        for reason, figures in medians.items():
            print(f"  {'; '.join(figures)}: {reason}")
        for r in compared:
            if r.interval == "median":
                _, lo, hi = paired_interval([(m, t) for _, m, t in r.pairs])
                print(f"  {r.figure}: the t-interval of the same rounds, for comparison: "
                      f"{interval_text(Verdict('t', None, lo, hi))}")
    if identities:
        print("\nidentity checks (both sides read the same value; equal or not, never counted as PASS):")
        for r in identities:
            v = r.verdict()
            values = ", ".join(f"{m:.6g}/{t:.6g}" for _, m, t in r.pairs) or "none"
            print(f"  {r.figure:<{width}}  {r.unit:<7} rounds (gpudash/reference) {values}  {v.name}")
            if v.name == "EQUAL":
                tally.identical += 1
            else:
                tally.identity_failed += 1
                details.append(detail_line(r, v.name))
    print("\nreferences (what the other side runs):")
    seen = []
    for r in rows:
        if r.reference_name not in seen and r.reference_name != "none":
            seen.append(r.reference_name)
            print(f"  {r.reference_name}")
    print("rounds of every row not PASS (gpudash's JSON figure / the reference = ratio):")
    for line in details:
        print("  " + line)
    return tally


def median_text(values):
    return f"{statistics.median(values):10.4g}" if values else f"{'-':>10}"


def ratio_text(ratio):
    return f"{ratio:7.3f}" if ratio is not None else f"{'-':>7}"


def interval_text(v):
    return f"{v.lo:.3f}–{v.hi:.3f}" if v.lo is not None else "-"


def detail_line(r, name):
    """'figure [VERDICT]: gpudash NAME / REFERENCE rounds 1: a/b = r, ...' with the missing rounds and the note."""
    line = f"{r.figure} [{name}]: {r.gpudash_name} / {r.reference_name}, rounds "
    line += ", ".join(f"{i}: {m:.4g}/{t:.4g} = {m / t:.3f}" for i, m, t in r.pairs) or "none paired"
    if r.reference_name == "none" and r.mine:
        line += "; gpudash " + ", ".join(f"{v:.4g}" for v in r.mine)
    if r.missing:
        line += "; " + "; ".join(r.missing[:4])
    if r.note:
        line += f"; {r.note}"
    return line


# ---- gpudash bench and its JSON ----

def run_bench(binary, device, kind, params, timeout, cpu=None):
    """Runs `gpudash bench --json --force` for one experiment; returns (run or None, seconds, problems).

    --force: the comparing PyTorch process holds a context on the GPU. A non-zero exit with JSON on
    stdout (a check failed) still yields the run; its failed checks are reported by `checks`.
    `cpu`: run gpudash on that one CPU core (lab_vs_torch.py pins both sides of host-bound groups to it).
    """
    cmd = [binary, "bench", "--device", str(device), "--json", "--force", "--params", json.dumps(params), kind]
    started = time.monotonic()
    problems = []
    try:
        pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, preexec_fn=pin)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - started, [f"gpudash bench {kind} timed out after {timeout} s"]
    except OSError as e:
        return None, time.monotonic() - started, [f"cannot run {binary}: {e}"]
    seconds = time.monotonic() - started
    try:
        runs = json.loads(out.stdout)
    except ValueError:
        tail = (out.stderr or out.stdout).strip()[-400:]
        return None, seconds, [f"gpudash bench {kind} exited {out.returncode} without JSON: {tail}"]
    run = runs[0] if isinstance(runs, list) and runs and isinstance(runs[0], dict) else None
    if run is None:
        return None, seconds, [f"gpudash bench {kind} printed no run (exit {out.returncode}): {out.stderr.strip()[-300:]}"]
    if run.get("status") != "succeeded":
        problems.append(f"gpudash bench {kind}: status {run.get('status')}, error {run.get('error')}")
    if run.get("simulated"):
        problems.append(f"gpudash bench {kind}: the run is simulated")
    if out.returncode != 0 and not problems and all(c["passed"] for c in checks(run)):
        problems.append(f"gpudash bench {kind} exited {out.returncode}: {out.stderr.strip()[-300:]}")
    return run, seconds, problems


def _result(run):
    result = run.get("result") if isinstance(run, dict) else None
    return result if isinstance(result, dict) else {}


def series_point(run, name, x):
    """Median y of series `name` at x, or None."""
    for s in _result(run).get("series") or []:
        if isinstance(s, dict) and s.get("name") == name:
            for p in s.get("points") or []:
                try:
                    if int(p["x"]) == int(x):
                        return float(p["y"]["median"])
                except (KeyError, TypeError, ValueError):
                    continue
    return None


def figure(run, name):
    """Median of figure `name`, or None."""
    for f in _result(run).get("figures") or []:
        try:
            if f["name"] == name:
                return float(f["stats"]["median"])
        except (KeyError, TypeError, ValueError):
            continue
    return None


def matrix_cell(run, name, a, b):
    """Cell (a → b) of matrix `name`, or None."""
    for m in _result(run).get("matrices") or []:
        try:
            if m["name"] == name:
                i, j = m["devices"].index(a), m["devices"].index(b)
                value = m["cells"][i][j]
                return float(value) if value is not None else None
        except (KeyError, TypeError, ValueError, IndexError):
            continue
    return None


def checks(run):
    """The run's checks as dicts with name, passed, detail (a malformed entry counts as failed)."""
    out = []
    for c in _result(run).get("checks") or []:
        if isinstance(c, dict):
            out.append({"name": str(c.get("name")), "passed": c.get("passed") is True, "detail": str(c.get("detail"))})
        else:
            out.append({"name": repr(c), "passed": False, "detail": "malformed check"})
    return out


class CheckLog:
    """Every gpudash check of every round: a failed one fails the comparison."""

    def __init__(self):
        self.seen = {}  # (kind, name) -> [passed count, failed count, last failing detail]
        self.problems = []

    def add(self, kind, run, problems):
        self.problems.extend(problems)
        if run is None:
            return
        if not checks(run):
            self.problems.append(f"{kind}: the run has no correctness check")
        for c in checks(run):
            entry = self.seen.setdefault((kind, c["name"]), [0, 0, ""])
            entry[0 if c["passed"] else 1] += 1
            if not c["passed"]:
                entry[2] = c["detail"]

    def report(self):
        """Prints the checks; returns the number of failures (failed checks + run problems)."""
        print("\n== gpudash's correctness checks, over all rounds")
        failures = 0
        for (kind, name), (ok, bad, detail) in sorted(self.seen.items()):
            print(f"  [{'PASS' if bad == 0 else 'FAIL'}] {kind}: {name}: {ok} passed, {bad} failed"
                  + (f" (last failure: {detail})" if bad else ""))
            failures += 1 if bad else 0
        for p in self.problems:
            print(f"  [FAIL] {p}")
        return failures + len(self.problems)


def interleaved_rounds(args, group, log, bench, gpudash_side, reference_side, finish_round, before_bench):
    """Rounds of one group of rows (p2p_vs_torch.py, collectives_vs_torch.py) until next_round stops them, with
    the reason printed; returns (rounds run, the last gpudash run or None).

    In each round `gpudash bench` runs once on GPU 0 (bench = (kind, params, timeout s); before_bench() first,
    e.g. torch.cuda.synchronize() so no reference work is still queued) and the reference once, gpudash first
    in odd rounds and the reference first in even ones. gpudash_side(run or None) and reference_side() give the
    round's figures; finish_round(mine, theirs, round index from 0, seconds since the start) adds them to the
    rows and returns the round's line, printed as it ends. Every run's checks and problems go into `log`."""
    kind, params, timeout = bench
    last = None
    started, rounds_run = time.monotonic(), 0
    while True:
        todo, why_not = rules.next_round([group], rounds_run, args.rounds, args.max_rounds, args.deadline_s,
                                   time.monotonic() - started)
        if not todo:
            print(f"stopping after {rounds_run} rounds: {why_not}")
            return rounds_run, last
        round_started = time.monotonic()
        mine = theirs = None
        for side in (("gpudash", "reference") if rounds_run % 2 == 0 else ("reference", "gpudash")):
            if side == "gpudash":
                before_bench()
                run, _, problems = run_bench(args.binary, 0, kind, params, timeout)
                log.add(kind, run, problems)
                mine = gpudash_side(run)
                last = run or last
            else:
                theirs = reference_side()
        group.round_seconds.append(time.monotonic() - round_started)
        print(finish_round(mine, theirs, rounds_run, time.monotonic() - started), flush=True)
        rounds_run += 1
