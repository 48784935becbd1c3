#!/usr/bin/env python3
"""Checks that the figures the docs quote from a GPU run are in the log they name.

Run from anywhere: `python3 tests/docs_figures.py` (or `--root DIR` for another tree). Python 3
standard library only. Exit 0 with a count of checked figures; exit 1 listing every offence.

Files: README.md and docs/*.md. Logs: the files under docs/gpu-runs/, and benchmark logs under
docs/bench-runs/ (named the same way, with "bench-runs/" for "gpu-runs/").

Passages. A file is cut into passages, each checked on its own:
  - a paragraph (non-blank lines up to a blank line, a heading, a table, a fence or a list item);
  - a list item (a line starting "- ", "* " or "1. ", with the indented or unmarked lines after it);
  - a table row (a line starting "|");
  - a line inside a ``` fence;
  - a heading.
A passage names a log with a path containing "gpu-runs/NAME.log" or "gpu-runs/NAME.txt" (with or
without "docs/", as a link or as text; a "*" in NAME is a glob), or with a bare NAME.log / NAME.txt that
exists in docs/gpu-runs/. A table row or fence line that names no log of its own takes the logs of the
paragraph just above its table or fence; a list item, those of the paragraph just above its list when
that paragraph ends with ":" (it introduces the list).

Rule 1: every gpu-runs/ path a doc names (in any passage) must exist (a glob: match at least one file).
Rule 2: in a passage that names (or takes) logs, every figure must occur in one of those logs.

Figures. Before reading figures, inline code spans (`...`), link targets "](...)", URLs and log names are
removed from the passage. A figure is then
  - a number with a decimal point: 392.5, 1.042, 0.0008, 21,710.8; or
  - a number followed (after at most one space) by a unit: 96 %, 750 GB/s, 7 µs, 4,466 µs, 20 GiB.
    Units: % µs us ns ms s min h GB/s GiB/s MB/s MiB/s TB/s TFLOP/s GFLOP/s B KB KiB MB MiB GB GiB
    TB bytes W kWh Hz °C × x (a unit ends at a non-letter: "5 seconds" has none).
Not figures: a number that follows a letter, digit, "_" or "." ("H200", "fp16", "x16", "session9"),
an integer glued to letters after it ("5892a95"),
versions (two or more dots: 2.11.0, 580.159.04; or right after "v", "version " or "CUDA "), numbers
right after "§", "#", "issue " or "section ", and integers without a unit (dates, counts, sizes such
as 8192, issue and section numbers).

Matching. Numbers are compared as tokens of digits, dots and commas (so "1.04" is not found inside
"21.042", nor "159.04" inside "580.159.04"), after: thousands commas removed, trailing zeros after the
point removed on both sides (750.0 = 750 = 750.00, 96.50 = 96.5), the sign dropped (+0.05%, −0.29%).
  - A decimal occurs in a log when the log holds that number anywhere; its unit is not compared,
    since logs print units in column headers (96.5% is found as "96.5" or "96.5%").
  - An integer with a unit needs more: for "%", the log holds the number directly followed by "%"
    (one space allowed: "31%" or "31 %"); for any other unit, one log line holds both the number and
    the unit as a word (µs and us are the same unit): "177 µs" needs a line with 177 and µs.
No rounding and no unit conversion: a doc that says 96.5 where the log says 96.34, or 32 % where it
says 31%, fails.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
from dataclasses import dataclass, field

UNITS = [
    "TFLOP/s", "GFLOP/s", "GiB/s", "MiB/s", "GB/s", "MB/s", "TB/s",
    "bytes", "kWh", "KiB", "MiB", "GiB", "KB", "MB", "GB", "TB", "°C",
    "min", "µs", "us", "ns", "ms", "Hz", "%", "×", "x", "s", "h", "B", "W",
]
UNIT_RE = "|".join(re.escape(u) for u in UNITS)

# A number: thousands-grouped or plain digits, an optional fraction. Not preceded by a word
# character or a dot (so no "H200", no "1.2" inside "v1.2.3" starting mid-way).
NUMBER = re.compile(
    r"(?<![\w.])(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?P<after>(?:\.\d)?)"
)
UNIT_AFTER = re.compile(r" ?(?:" + UNIT_RE + r")(?![A-Za-z0-9_/])")
SKIP_BEFORE = re.compile(
    r"(?:§|#|\bv|\bversion |\bCUDA |\bissues? |\bsections? )$",
    re.IGNORECASE,
)

# A name ends where no word character and no ".word" follows: "p2p.log." at a sentence's end counts.
LOG_PATH = re.compile(r"(?:docs/)?(?P<dir>gpu-runs|bench-runs)/(?P<name>[\w*.\-]+?\.(?:log|txt))(?!\w|\.\w)")
BARE_LOG = re.compile(r"(?<![\w/.\-])(?P<name>[\w\-]+(?:\.[\w\-]+)*?\.(?:log|txt))(?!\w|\.\w)")
CODE_SPAN = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
URL = re.compile(r"https?://\S+")
LOG_TOKEN = re.compile(r"\d[\d.,]*")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")


@dataclass
class Passage:
    """One checked piece of a doc: its lines (number, text) and what kind of block it is."""

    kind: str  # paragraph, item, row, fence, heading
    lines: list[tuple[int, str]] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join(t for _, t in self.lines)


def passages(text: str) -> list[Passage]:
    """Cuts a markdown file into passages (see the module doc)."""
    out: list[Passage] = []
    cur: Passage | None = None
    in_fence = False
    for no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            in_fence = not in_fence
            cur = None
            continue
        if in_fence:
            out.append(Passage("fence", [(no, line)]))
            continue
        if not stripped:
            cur = None
            continue
        if stripped.startswith("#"):
            out.append(Passage("heading", [(no, line)]))
            cur = None
        elif stripped.startswith("|"):
            out.append(Passage("row", [(no, line)]))
            cur = None
        elif LIST_ITEM.match(line):
            cur = Passage("item", [(no, line)])
            out.append(cur)
        elif cur is not None:
            cur.lines.append((no, line))
        else:
            cur = Passage("paragraph", [(no, line)])
            out.append(cur)
    return out


def normalize(num: str) -> str:
    """Thousands commas out, trailing zeros after the point out: '1,750.50' -> '1750.5'."""
    num = num.replace(",", "")
    if "." in num:
        num = num.rstrip("0").rstrip(".")
    return num or "0"


def figures(text: str) -> list[str]:
    """The figures of a passage's text, as written (see the module doc for what counts)."""
    text = CODE_SPAN.sub(" ", text)
    text = LINK_TARGET.sub("]", text)
    text = URL.sub(" ", text)
    text = LOG_PATH.sub(" ", text)
    text = BARE_LOG.sub(" ", text)
    found = []
    for m in NUMBER.finditer(text):
        if m.group("after"):  # a third part: a version or an address
            continue
        end = m.end("num")
        rest = text[end:]
        if SKIP_BEFORE.search(text[: m.start()]):
            continue
        unit = UNIT_AFTER.match(rest)
        num = m.group("num")
        if "." not in num and unit is None and rest[:1] and (rest[0].isalnum() or rest[0] == "_"):
            continue  # an integer glued to a name: a hash such as 5892a95, 4096x
        if "." in num or unit is not None:
            found.append(num + (unit.group(0) if unit else ""))
    return found


def tokens(line: str) -> set[str]:
    """The number tokens of a log line, normalized; versions stay whole ('580.159.04')."""
    nums: set[str] = set()
    for tok in LOG_TOKEN.findall(line):
        tok = tok.rstrip(".,")
        for part in [tok] + tok.split(","):
            if part and part.count(".") <= 1:
                nums.add(normalize(part))
    return nums


class Log:
    """One log's numbers, whole and by line, for the two strengths of the rule."""

    def __init__(self, path: str) -> None:
        with open(path, encoding="utf-8", errors="replace") as f:
            self.lines = [(line, tokens(line)) for line in f.read().splitlines()]
        self.numbers = set().union(*(t for _, t in self.lines)) if self.lines else set()

    def holds(self, figure: str) -> bool:
        """Whether the log holds a figure as written in a doc (see the module doc)."""
        m = re.match(r"([\d,]+(?:\.\d+)?) ?(.*)", figure)
        num, unit = normalize(m.group(1)), m.group(2)
        if "." in m.group(1):
            return num in self.numbers
        if num not in self.numbers:
            return False
        if unit == "%":
            return any(re.search(rf"(?<![\d.]){re.escape(num)} ?%", line) for line, _ in self.lines)
        units = {unit, "us" if unit == "µs" else "µs" if unit == "us" else unit}
        return any(
            num in toks and any(re.search(rf"(?<![A-Za-z]){re.escape(u)}(?![A-Za-z])", line) for u in units)
            for line, toks in self.lines
        )


@dataclass
class Offence:
    """One thing the check failed on, printed as file:line: message."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def cited_logs(passage: Passage, runs_dir: str, rel: str) -> tuple[list[str], list[Offence]]:
    """The log files a passage names, and an offence for every path that matches no file."""
    logs: list[str] = []
    missing: list[Offence] = []
    for no, line in passage.lines:
        for m in LOG_PATH.finditer(line):
            name, folder = m.group("name"), m.group("dir")
            hits = sorted(glob.glob(os.path.join(os.path.dirname(runs_dir), folder, name)))
            if not hits:
                missing.append(Offence(f"{rel}:{no}", f"docs/{folder}/{name} does not exist"))
            logs.extend(h for h in hits if h not in logs)
        scrubbed = LOG_PATH.sub(" ", line)
        for m in BARE_LOG.finditer(scrubbed):
            for folder in ("gpu-runs", "bench-runs"):
                path = os.path.join(os.path.dirname(runs_dir), folder, m.group("name"))
                if os.path.isfile(path) and path not in logs:
                    logs.append(path)
    return logs, missing


def check(root: str) -> tuple[list[Offence], int]:
    """Checks every doc under root; returns the offences and how many figures were checked."""
    runs_dir = os.path.join(root, "docs", "gpu-runs")
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    cache: dict[str, Log] = {}
    offences: list[Offence] = []
    checked = 0
    for doc in docs:
        if not os.path.isfile(doc):
            continue
        rel = os.path.relpath(doc, root)
        with open(doc, encoding="utf-8") as f:
            parts = passages(f.read())
        # What the paragraph introducing the current table, list or fence cites: its logs, and
        # whether it named any log at all (a passage citing only missing logs is checked, and fails).
        block: tuple[list[str], bool] = ([], False)
        prev: tuple[Passage, list[str], bool] | None = None
        for p in parts:
            logs, missing = cited_logs(p, runs_dir, rel)
            offences.extend(missing)
            cites = bool(logs or missing)
            if p.kind in ("row", "item", "fence") and (prev is None or prev[0].kind != p.kind):
                block = ([], False)  # a new block: does the passage just above introduce it?
                if prev is not None and prev[0].kind == "paragraph":
                    if p.kind != "item" or prev[0].text().rstrip().endswith(":"):
                        block = (prev[1], prev[2])
            prev = (p, logs, cites)
            if p.kind in ("row", "item", "fence") and not cites:
                logs, cites = block
            if not cites:
                continue
            for path in logs:
                if path not in cache:
                    cache[path] = Log(path)
            names = ", ".join("docs/" + os.path.relpath(p_, os.path.dirname(runs_dir)) for p_ in logs)
            for no, line in p.lines:
                for fig in figures(line):
                    checked += 1
                    if not logs:
                        offences.append(Offence(f"{rel}:{no}", f"{fig!r}: its log does not exist"))
                    elif not any(cache[path].holds(fig) for path in logs):
                        offences.append(Offence(f"{rel}:{no}", f"{fig!r} is not in {names}"))
    return offences, checked


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(here), help="the repository (default: this one)")
    args = ap.parse_args()
    offences, checked = check(args.root)
    for o in offences:
        print(o)
    if offences:
        print(f"docs_figures: {len(offences)} offence(s) over {checked} figures checked", file=sys.stderr)
        return 1
    print(f"docs_figures: {checked} figures checked, each found in the log its passage names")
    return 0


if __name__ == "__main__":
    sys.exit(main())
