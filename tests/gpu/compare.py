"""Shared by lab_vs_torch.py and p2p_vs_torch.py: running `gpudash bench`, reading its JSON
defensively, the two-sided verdict over interleaved rounds, and the table.

The verdict of a row. Each side gives one figure per round (the median of that round's timed
repetitions); R rounds give R figures per side. Then

    ratio = median(gpudash rounds) / median(reference rounds)
    band  = [Q1(gpudash) / Q3(reference), Q3(gpudash) / Q1(reference)]

(Q1, Q3: quartiles of the per-round figures). The band is where the ratio can lie given both
sides' round-to-round spread. With a tolerance of ±5% (some rows have an absolute floor, printed):

    PASS          the whole band lies inside 1 ± tolerance;
    FAIL          the whole band lies outside it, on either side (gpudash too slow or too fast);
    INCONCLUSIVE  the band crosses 1 ± tolerance: the two sides' spread is wider than the target
                  can judge. Counted and printed with both sides' rounds, never as PASS.
    MISSING       a figure gpudash or the reference did not produce: counted as FAIL.
"""
import json
import os
import statistics
import subprocess
import time

TOLERANCE = 0.05


def quartiles(values):
    """(Q1, median, Q3) of the values, linear interpolation between order statistics."""
    values = sorted(values)
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def spread_text(values):
    """'1.23 (IQR -0.4%/+0.6%)' of per-round figures."""
    q1, m, q3 = quartiles(values)
    if m == 0:
        return f"{m:.4g}"
    return f"{m:.4g} (IQR {(q1 / m - 1) * 100:+.1f}%/{(q3 / m - 1) * 100:+.1f}%)"


class Row:
    """One compared figure: per-round values of both sides, and how it is judged.

    `judged=False` rows are printed with a reason (`note`) and never counted.
    `floor` is an absolute tolerance in the row's unit (e.g. 0.3 µs for host-side latency, where
    timer and binding costs are of that order); the tolerance is max(5%, floor / reference).
    """

    def __init__(self, figure, unit, gpudash_name, reference_name, judged=True, floor=0.0, note=""):
        self.figure, self.unit = figure, unit
        self.gpudash_name, self.reference_name = gpudash_name, reference_name
        self.judged, self.floor, self.note = judged, floor, note
        self.mine, self.theirs = [], []
        self.missing = []

    def add(self, mine, theirs, round_index):
        """Adds one round; a None on either side is remembered as MISSING in that round."""
        if mine is None:
            self.missing.append(f"round {round_index + 1}: gpudash has no {self.gpudash_name}")
        elif isinstance(mine, (int, float)) and mine > 0:
            self.mine.append(float(mine))
        else:
            self.missing.append(f"round {round_index + 1}: gpudash's {self.gpudash_name} is {mine!r}")
        if theirs is None:
            if self.reference_name != "none":
                self.missing.append(f"round {round_index + 1}: no reference figure")
        elif isinstance(theirs, (int, float)) and theirs > 0:
            self.theirs.append(float(theirs))
        else:
            self.missing.append(f"round {round_index + 1}: reference figure is {theirs!r}")

    def truncate(self, rounds):
        """Keeps the first `rounds` rounds (after an interruption)."""
        self.mine, self.theirs = self.mine[:rounds], self.theirs[:rounds]

    def verdict(self):
        """(verdict, ratio, lo, hi, tolerance)."""
        if not self.mine or not self.theirs:
            return ("MISSING" if self.judged else "info"), None, None, None, None
        gq1, gm, gq3 = quartiles(self.mine)
        tq1, tm, tq3 = quartiles(self.theirs)
        ratio, lo, hi = gm / tm, gq1 / tq3, gq3 / tq1
        tol = max(TOLERANCE, self.floor / tm)
        if not self.judged:
            return "info", ratio, lo, hi, tol
        if self.missing:
            # Some rounds lacked the figure: a gap is a failure, even when other rounds had it.
            return "MISSING", ratio, lo, hi, tol
        if 1 - tol <= lo and hi <= 1 + tol:
            return "PASS", ratio, lo, hi, tol
        if hi < 1 - tol or lo > 1 + tol:
            return "FAIL", ratio, lo, hi, tol
        return "INCONCLUSIVE", ratio, lo, hi, tol


def print_table(rows, title, reference_label="PyTorch"):
    """Prints the table and the details; returns (failed, inconclusive, passed) counts."""
    print(f"\n== {title}")
    print("ratio = gpudash / reference (medians of the per-round figures); band = [Q1(gpudash)/Q3(ref), "
          "Q3(gpudash)/Q1(ref)]; PASS: band inside 1±tol; FAIL: band outside; INCONCLUSIVE: band crosses")
    width = max([len(r.figure) for r in rows] + [6])
    print(f"{'figure':<{width}}  {'unit':<7} {'gpudash':>10} {reference_label:>10} {'ratio':>7}  "
          f"{'band':<13} {'tol':>5}  verdict")
    failed = inconclusive = passed = 0
    details = []
    for r in rows:
        verdict, ratio, lo, hi, tol = r.verdict()
        mine = f"{statistics.median(r.mine):10.4g}" if r.mine else f"{'-':>10}"
        theirs = f"{statistics.median(r.theirs):10.4g}" if r.theirs else f"{'-':>10}"
        ratio_text = f"{ratio:7.3f}" if ratio is not None else f"{'-':>7}"
        band = f"{lo:.3f}–{hi:.3f}" if lo is not None else "-"
        tol_text = f"±{tol * 100:.0f}%" if tol is not None else "-"
        print(f"{r.figure:<{width}}  {r.unit:<7} {mine} {theirs} {ratio_text}  {band:<13} {tol_text:>5}  {verdict}")
        if verdict in ("FAIL", "MISSING"):
            failed += 1
        elif verdict == "INCONCLUSIVE":
            inconclusive += 1
        elif verdict == "PASS":
            passed += 1
        if verdict != "PASS":
            line = f"{r.figure} [{verdict}]: gpudash {r.gpudash_name} rounds " + \
                   (", ".join(f"{v:.4g}" for v in r.mine) or "none")
            if r.mine:
                line += f" = {spread_text(r.mine)}"
            if r.reference_name != "none":
                line += f"; {r.reference_name} rounds " + (", ".join(f"{v:.4g}" for v in r.theirs) or "none")
            if r.theirs:
                line += f" = {spread_text(r.theirs)}"
            if r.missing:
                line += "; " + "; ".join(r.missing[:4])
            if r.note:
                line += f"; {r.note}"
            details.append(line)
    print("\nreferences (what the other side runs):")
    seen = []
    for r in rows:
        if r.reference_name not in seen and r.reference_name != "none":
            seen.append(r.reference_name)
            print(f"  {r.reference_name}")
    print("rounds of every row not PASS (gpudash's JSON figure, then the reference):")
    for line in details:
        print("  " + line)
    return failed, inconclusive, passed


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
