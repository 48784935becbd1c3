#!/usr/bin/env python3
"""The rules that judge the GPU comparisons, read from tests/gpu/rules.json by one loader (load) for compare.py,
the comparison scripts, the shell scripts and runs_since_rules.py, and the schedule of rounds they set (the
command line's defaults, next_round). Python 3 standard library only (JSON: the GPU machine's Python may
predate tomllib).

The file:
  version   a positive integer, bumped with every change of the file's content: test_compare.py holds each
            version's sha256 (RULES_SHA256) and fails when the content changes under the same version
  changed   the date of that version, YYYY-MM-DD
  why       a sentence or a list of sentences: what the version decides, and why
  default   {"tolerance": fraction, "interval": "t" or "median"}: what a row's rule leaves out
  rows      {key: rule}, the rule of each compared row or group: tolerance, interval, and optionally reason
            (required for a tolerance above ±5%), interval_reason (required for the median interval), note
  scripts   {name: schedule}: rounds, max_rounds, deadline_s, and the budget the deadline is cut from:
            part_timeout_s (the part's timeout in all.sh), grace_s (the comparison's own timeout past its
            deadline), outside_s (the script's steps outside the comparison); the three parts must fit:
            deadline_s + grace_s + outside_s <= part_timeout_s
Unknown keys are refused (a misspelt rule would silently not apply).

Every run prints Rules.label, "rules v1 sha256 0123456789ab", at the top of its output and in its summary
line, so a log says which rules judged it; a run whose rounds or deadline were set by hand says so there.

    python3 tests/gpu/rules.py label         # the label, for all.sh's summary
    python3 tests/gpu/rules.py shell lab     # RULES_LABEL=... RULES_ROUNDS=... for lab.sh, p2p.sh, collectives.sh
Exit 1 with the reason on stderr when the file cannot be used.
"""
import datetime
import hashlib
import json
import os
import shlex
import sys

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rules.json")
# A row's tolerance above this needs a reason in the rules file, printed under the table (compare.TOLERANCE).
BASE_TOLERANCE = 0.05
INTERVAL_KINDS = ("t", "median")
TOP_KEYS = ("version", "changed", "why", "default", "rows", "scripts")
RULE_KEYS = ("tolerance", "interval", "reason", "interval_reason", "note")
SCHEDULE_KEYS = ("rounds", "max_rounds", "deadline_s", "grace_s", "outside_s", "part_timeout_s")


class RulesError(ValueError):
    """A rules file that cannot be used: which file, where in it, and what is wrong."""


class Rules:
    """A loaded rules file: version, changed, why, default, rows, scripts, and the file's sha256."""

    def __init__(self, path, data, sha256):
        self.path, self.sha256 = path, sha256
        self.version, self.changed, self.why = data["version"], data["changed"], data["why"]
        self.default, self.rows, self.scripts = data["default"], data["rows"], data["scripts"]

    @property
    def label(self):
        return f"rules v{self.version} sha256 {self.sha256[:12]}"

    def banner(self):
        return f"{self.label} ({os.path.relpath(self.path)}, changed {self.changed})"

    def row(self, key):
        """Row's keyword arguments (tolerance, reason, interval, interval_reason) for the row or group `key`."""
        if key not in self.rows:
            raise RulesError(f"{self.path} (rules v{self.version}) has no rule for '{key}': add one to 'rows' "
                             f"(a change of the file needs a version bump)")
        rule = {**self.default, **self.rows[key]}
        return {"tolerance": rule["tolerance"], "reason": rule.get("reason", ""), "interval": rule["interval"],
                "interval_reason": rule.get("interval_reason", "")}

    def script(self, name):
        """The schedule of a comparison script: rounds, max_rounds, deadline_s, grace_s, outside_s, part_timeout_s."""
        if name not in self.scripts:
            raise RulesError(f"{self.path} (rules v{self.version}) has no schedule for '{name}' under 'scripts'")
        return dict(self.scripts[name])


def load(path=PATH):
    """The Rules of `path`; RulesError saying what is wrong with a file that cannot be used."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise RulesError(f"cannot read the rules file {path}: {e.strerror or e}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise RulesError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise RulesError(f"{path}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    check(path, data)
    return Rules(path, data, hashlib.sha256(raw).hexdigest())


def check(path, data):
    """Raises RulesError at the first thing wrong in a parsed rules file (see the module's docstring)."""

    def fail(where, what):
        raise RulesError(f"{path}: {where}: {what}")

    def keys(where, value, wanted, optional=()):
        if not isinstance(value, dict):
            fail(where, f"must be an object, not {type(value).__name__}")
        for k in value:
            if k not in wanted and k not in optional:
                fail(where, f"unknown key '{k}' (known: {', '.join(list(wanted) + list(optional))})")
        for k in wanted:
            if k not in value:
                fail(where, f"missing '{k}'")

    def integer(where, value, least):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            fail(where, f"must be an integer of at least {least}, not {value!r}")

    def text(where, value):
        if not isinstance(value, str) or not value.strip():
            fail(where, f"must be a non-empty string, not {value!r}")

    def rule(where, value, base):
        tolerance, interval = value.get("tolerance", base.get("tolerance")), value.get("interval", base.get("interval"))
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 < tolerance < 1:
            fail(where, f"tolerance must be a fraction between 0 and 1 (0.05 is ±5%), not {tolerance!r}")
        if interval not in INTERVAL_KINDS:
            fail(where, f"interval {interval!r} is not one of {', '.join(INTERVAL_KINDS)}")
        for k in ("reason", "interval_reason", "note"):
            if k in value:
                text(f"{where}.{k}", value[k])
        if tolerance > BASE_TOLERANCE and "reason" not in value:
            fail(where, f"a tolerance of ±{tolerance:.0%} is wider than ±{BASE_TOLERANCE:.0%}: it needs a 'reason'")
        if interval != "t" and "interval_reason" not in value:
            fail(where, f"the {interval} interval needs an 'interval_reason'")

    keys("the file", data, TOP_KEYS)
    integer("version", data["version"], 1)
    text("changed", data["changed"])
    try:
        datetime.date.fromisoformat(data["changed"])
    except ValueError:
        fail("changed", f"must be a date YYYY-MM-DD, not {data['changed']!r}")
    why = data["why"]
    for i, sentence in enumerate(why if isinstance(why, list) and why else [why]):
        text(f"why[{i}]" if isinstance(why, list) else "why", sentence)
    keys("default", data["default"], ("tolerance", "interval"))
    rule("default", data["default"], {})
    if not isinstance(data["rows"], dict) or not data["rows"]:
        fail("rows", "must be a non-empty object of rules")
    for key, value in data["rows"].items():
        keys(f"rows.{key}", value, (), RULE_KEYS)
        rule(f"rows.{key}", value, data["default"])
    if not isinstance(data["scripts"], dict) or not data["scripts"]:
        fail("scripts", "must be a non-empty object of schedules")
    for name, s in data["scripts"].items():
        keys(f"scripts.{name}", s, SCHEDULE_KEYS)
        for k in SCHEDULE_KEYS:
            integer(f"scripts.{name}.{k}", s[k], 0 if k in ("grace_s", "outside_s") else 1)
        if s["rounds"] < 2:
            fail(f"scripts.{name}.rounds", f"must be at least 2 (an interval needs two rounds), not {s['rounds']}")
        if s["max_rounds"] < s["rounds"]:
            fail(f"scripts.{name}.max_rounds", f"{s['max_rounds']} is fewer than rounds ({s['rounds']})")
        if s["deadline_s"] + s["grace_s"] + s["outside_s"] > s["part_timeout_s"]:
            fail(f"scripts.{name}", f"deadline_s {s['deadline_s']} + grace_s {s['grace_s']} + outside_s "
                                    f"{s['outside_s']} is more than part_timeout_s {s['part_timeout_s']}: the script "
                                    "could not finish inside its timeout")


def version_problem(book, sha256_by_version):
    """Why `book` does not match a table {version: sha256 of the file at that version} (test_compare.py's
    RULES_SHA256), or None: a change of the file under the same version, or a version the table lacks."""
    known = sha256_by_version
    if book.version not in known:
        return f"rules version {book.version} has no sha256 in the table: add {book.version}: \"{book.sha256}\""
    if book.version != max(known):
        return f"rules.json is version {book.version}, older than version {max(known)} in the table"
    if book.sha256 != known[book.version]:
        return (f"rules.json changed without a version bump: version {book.version} is sha256 {known[book.version]}, "
                f"the file {book.sha256}; bump 'version', set 'changed' and 'why', and add the new hash to the table")
    return None


def load_or_exit(path=PATH):
    """load(), or the reason on stdout and exit 1 (a comparison without its rules is a failure, not a verdict)."""
    try:
        return load(path)
    except RulesError as e:
        print(f"FAIL: {e}", flush=True)
        sys.exit(1)


# ---- the schedule of rounds the rules set ----

class RoundGroup:
    """Rows measured together in a round (one `gpudash bench` run and its reference), with the seconds each of
    its rounds took (both sides): what next_round needs to pick the groups of the next round."""

    def __init__(self, name, rows):
        self.name, self.rows = name, rows
        self.round_seconds = []

    def undecided(self):
        """Whether a row of the group still needs rounds (its interval crosses a limit)."""
        return not all(row.decided() for row in self.rows.values())

    def longest_round(self):
        """Seconds of the group's longest round so far, 0 before its first."""
        return max(self.round_seconds, default=0.0)


def next_round(groups, rounds_run, rounds, max_rounds, deadline_s, elapsed):
    """(the groups to measure in the next round, why none when that list is empty).

    Rounds 1 and 2 measure every group (an interval needs two pairs). Up to `rounds`, every group; after it, up
    to `max_rounds`, only the groups with a row still UNDECIDED. From round 3 on, a group runs only if its
    longest round so far still fits before `deadline_s` after the groups before it in this round, so a cheap
    undecided group keeps getting rounds when an expensive one no longer fits."""
    if rounds_run >= max_rounds:
        return [], f"--max-rounds {max_rounds} reached"
    if rounds_run < 2:
        return list(groups), ""
    wanted = list(groups) if rounds_run < rounds else [g for g in groups if g.undecided()]
    if not wanted:
        return [], "every row is decided"
    todo, planned = [], elapsed
    for g in wanted:
        if planned + g.longest_round() <= deadline_s:
            todo.append(g)
            planned += g.longest_round()
    if not todo:
        return [], f"the next round of {', '.join(g.name for g in wanted)} would pass the {deadline_s:.0f} s deadline"
    return todo, ""


def round_arguments(ap, book, name, rounds_help, deadline_help):
    """--rounds, --max-rounds and --deadline-s, their defaults from the rules' schedule of script `name`."""
    s = book.script(name)
    ap.add_argument("--rounds", type=int, default=s["rounds"], help=f"{rounds_help} ({book.label}: {s['rounds']})")
    ap.add_argument("--max-rounds", type=int, default=s["max_rounds"],
                    help=f"rounds at most, extra ones measuring only groups with an UNDECIDED row "
                         f"({book.label}: {s['max_rounds']})")
    ap.add_argument("--deadline-s", type=float, default=s["deadline_s"],
                    help=f"{deadline_help} ({book.label}: {s['deadline_s']})")


def parse_round_arguments(ap, book, name):
    """The parsed command line, with args.rules_label: the rules' label, and each of --rounds, --max-rounds and
    --deadline-s that departs from the rules (such a run was not judged by them alone). A usage error exits 1
    (argparse's 2 would read as INCONCLUSIVE); --max-rounds is never less than --rounds."""
    try:
        args = ap.parse_args()
    except SystemExit as e:
        sys.exit(1 if e.code else 0)
    args.max_rounds = max(args.max_rounds, args.rounds)
    s = book.script(name)
    given = (("rounds", args.rounds), ("max-rounds", args.max_rounds), ("deadline-s", args.deadline_s))
    overrides = [f"--{flag} {value:g} (rules {s[flag.replace('-', '_')]})" for flag, value in given
                 if value != s[flag.replace("-", "_")]]
    args.rules_label = book.label + (f", overridden: {', '.join(overrides)}" if overrides else "")
    return args


def main(argv):
    if argv[:1] == ["label"] and len(argv) == 1:
        print(load().label)
    elif argv[:1] == ["shell"] and len(argv) == 2:
        book = load()
        s = book.script(argv[1])
        print(f"RULES_LABEL={shlex.quote(book.label)}")
        for k in SCHEDULE_KEYS:
            print(f"RULES_{k.upper()}={s[k]}")
    else:
        print("usage: rules.py label | rules.py shell SCRIPT", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except RulesError as e:
        print(f"rules.py: {e}", file=sys.stderr)
        sys.exit(1)
