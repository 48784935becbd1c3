#!/usr/bin/env python3
"""Lists every logged GPU run judged by the current rules (tests/gpu/rules.json): the logs under docs/runs/AREA/
whose comparison summary lines name the rules' version and sha256, with each summary's verdict counts and exit.

    python3 tests/gpu/runs_since_rules.py [--root DIR]

A comparison's summary line ("lab vs PyTorch: ...", "p2p: ...", "collectives: ...") ends with the rules' label,
"rules v1 sha256 0123456789ab" (rules.py), and with ", overridden: ..." when its rounds or deadline were set by
hand, or ", partial: ..." when it ran only some groups: such a run is listed, marked, and not counted as a run
under the rules. A log naming the current version with another sha256 is listed apart: that file changed
without a version bump. Exit 0 (1 when the rules file cannot be read).
"""
import argparse
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rules  # noqa: E402

SUMMARY = re.compile(r"^(?P<name>lab vs PyTorch|p2p|collectives): (?P<passed>\d+) PASS, (?P<failed>\d+) FAIL/MISSING, "
                     r"(?P<inconclusive>\d+) INCONCLUSIVE\b.*?; exit (?P<exit>\d+) \(.*?\); "
                     r"rules v(?P<version>\d+) sha256 (?P<sha>[0-9a-f]{12})(?P<rest>.*)$")


def summaries(path):
    """The comparison summary lines of one log, as SUMMARY matches (a line repeated by all.sh's tail once)."""
    found, seen = [], set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = SUMMARY.match(line.strip())
            if m and m.group(0) not in seen:
                seen.add(m.group(0))
                found.append(m)
    return found


def runs(book, root):
    """(runs under the rules, marked runs: overridden or partial, runs naming the version with another sha256);
    each a list of (log path relative to root, summary match)."""
    under, marked, other = [], [], []
    logs = sorted(glob.glob(os.path.join(root, "docs", "runs", "*", "*.log"))
                  + glob.glob(os.path.join(root, "docs", "runs", "*", "*.txt")))
    for path in logs:
        for m in summaries(path):
            if int(m.group("version")) != book.version:
                continue
            entry = (os.path.relpath(path, root), m)
            if m.group("sha") != book.sha256[:12]:
                other.append(entry)
            elif m.group("rest").strip():
                marked.append(entry)
            else:
                under.append(entry)
    return under, marked, other


def text(entry):
    path, m = entry
    line = (f"  {path}: {m.group('name')} {m.group('passed')} PASS, {m.group('failed')} FAIL/MISSING, "
            f"{m.group('inconclusive')} INCONCLUSIVE, exit {m.group('exit')}")
    rest = m.group("rest").lstrip(", ").strip()
    return line + (f" ({rest})" if rest else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."),
                    help="the repository's root (default: this file's)")
    args = ap.parse_args()
    try:
        book = rules.load(os.path.join(args.root, "tests", "gpu", "rules.json"))
    except rules.RulesError as e:
        print(f"runs_since_rules.py: {e}")
        return 1
    under, marked, other = runs(book, args.root)
    print(f"{book.label} (changed {book.changed})")
    print(f"runs under rules v{book.version}: " + (f"{len(under)}" if under else "none yet"))
    for entry in under:
        print(text(entry))
    if marked:
        print(f"runs naming rules v{book.version} with rounds, deadline or groups set by hand (not counted):")
        for entry in marked:
            print(text(entry))
    if other:
        print(f"runs naming rules v{book.version} with another sha256 (the file changed without a version bump):")
        for entry in other:
            print(text(entry) + f" [sha256 {entry[1].group('sha')}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
