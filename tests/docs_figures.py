#!/usr/bin/env python3
"""Checks that every figure the docs quote from a run is on a line of the log they name.

Run from anywhere: `python3 tests/docs_figures.py` (or `--root DIR` for another tree). Python 3
standard library only. Exit 0 with counts; exit 1 listing every offence as file:line: message.

Files: README.md and docs/*.md. Logs: the files under docs/runs/AREA/, one folder per kind of run
(gpu, lab, rss, nccl, fleet, browser, load; any folder there counts).

Passages. A file is cut into passages, each checked on its own: a paragraph (lines up to a blank
line, a heading, a table, a fence or a list item); a list item ("- ", "* ", "1. " and the lines after
it); a table row (a line starting "|"); a line inside a ``` fence; a heading. A passage names a log
with a path "runs/AREA/NAME.log" (or .txt; with or without "docs/"; a link or text; a "*" in AREA or
NAME is a glob), or with a bare NAME.log that exists in one of the areas. A table row or fence line
that names no log takes the logs (and the marker) of the paragraph just above its table or fence; a
list item, those of the paragraph above its list if it ends with ":".

Rule 1: every log path a doc names exists (a glob matches at least one file). A path of the old
        layout ("gpu-runs/NAME.log", "bench-runs/NAME.log", or "runs/NAME.log" with no area) is an
        offence too: the logs live in docs/runs/AREA/ only.
Rule 2: in a passage that names (or takes) logs, every figure is held by a line of one of them.
Rule 3: a benchmark passage with figures names (or takes) a log, or is marked: it says "no log",
        "without a log" or "not measured" (any case), or its heading does (the marker then covers
        every passage up to the next heading). The marker is for settings, goals and figures that
        were measured without keeping a log; it is printed in the doc, so the reader sees it too.
        Benchmark passages: all of docs/BENCHMARKS.md and README.md's "## Figures" section
        (BENCHMARK_SCOPE); headings are exempt. Other passages that name no log are not checked.
Scope of the history: docs/CHANGELOG.md (HISTORY_SCOPE), where earlier sessions' figures go once
        superseded, gets rules 1 and 2 only, never rule 3, even if BENCHMARK_SCOPE named it: the logs
        a passage there names must exist and hold each of its figures, as in any doc, but a passage
        that names none is history measured without a log, counted apart and not checked.

Figures. Code spans, link targets "](...)", URLs and log names are blanked first. A figure is
  - a number with a decimal point: 392.5, 1.042, 21,710.8;
  - a number with a unit after it (at most one space): 96 %, 750 GB/s, 4,466 µs, 20 GiB. Units: % µs
    us ns ms s min h GB/s GiB/s MB/s MiB/s TB/s TFLOP/s GFLOP/s B bytes KB kB KiB MB MiB GB GiB TB W
    kWh Hz °C × x (a unit ends at a non-letter: "5 seconds" has none); or
  - a count: an integer, one space and a count word (PASS FAIL INCONCLUSIVE passed failed rounds
    round): "39 PASS", "13 rounds".
It is signed when "+", "-" or "−" stands right before it, not after a letter or digit ("+0.55%",
"(-6.5 J)"; not "0.8-1.1"); "±" is no sign. Not figures: a number right after a letter, digit, "_" or
"." ("H200", "x16"), an integer glued to letters ("5892a95"), versions (2.11.0, "v1.2", "CUDA 13.0"),
numbers after "§", "#", "issue ", "section ", and integers with neither unit nor count word.

Labels: the words that say what a figure is. A word is a letter and then letters, digits or "_"
("p99", "idle_held"; words in code spans count); one-letter words, units, count words and STOP_WORDS
(articles, prepositions, "per", "vs", "session", "log", and "gpudash", "GPU", "H200", which every log
line could carry) do not. A figure's labels:
  - the last three words before it, back to the previous decimal or count (an integer with a unit,
    a setting such as "1 MiB", does not end a label) or to the start of its cell or passage:
    "p50 1.9 ms" -> p50; "idle_held 2.0 ms, gpu_free 1.3 ms" -> gpu_free for 1.3;
  - with none there, the previous figure's labels ("9.84 / 49.96" and "39 PASS, 0 FAIL" share one);
  - with none, the next three words, up to the next figure;
  - and always, in a table row, the first three words of its first cell, and in a list item, the
    item's first three words (what the row or item is about).
A label is on a log line when the line, in lower case, holds it where a word starts (so "loop" is on
"loops:", "pageable" on "h2d_pageable", "sum" is not on "checksum"); a final plural "s" is dropped.

Matching. A log line's context is the line, its header (the nearest line above it in its block, up
to a blank line, with letters and no digits, as a table's header; else the block's first line) and
its title (the nearest line above starting "==" or "#", else the log's first line). Numbers are
compared as tokens of digits, dots and commas ("1.04" is not in "21.042" nor "159.04" in
"580.159.04"), thousands commas and trailing zeros after the point dropped (750.0 = 750). A log line
holds a figure when it holds the number and there:
  - sign: a signed figure has that sign (a log number without one, 0 included, is positive);
  - unit: the unit right after the number is the figure's (µs = us = μs, × = x, KB = kB, B = bytes;
    MiB is not MB, GiB/s not GB/s); if the log gives a bare number, the unit is in its context;
  - count: the same count word right after the number ("39 PASS" is not "39 passed");
  - label: one of the figure's labels is in the line's context; a count's, on the line itself (a
    figure with no label skips this).
No rounding and no conversion: 96.5 where the log says 96.34, 32 % for 31%, 0.9 ms for 0.9 µs, or
1.9 ms "p50" when the log's 1.9 is on its p99 line, all fail. The limit: a label that both lines
share, or that is on their common header or title, does not tell them apart; keep labels specific.
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
    "bytes", "kWh", "KiB", "MiB", "GiB", "KB", "kB", "MB", "GB", "TB", "°C",
    "min", "µs", "μs", "us", "ns", "ms", "Hz", "%", "×", "x", "s", "h", "B", "W",
]
SAME_UNIT = {"us": "µs", "μs": "µs", "x": "×", "kB": "KB", "bytes": "B"}
COUNT_WORDS = ["PASS", "FAIL", "INCONCLUSIVE", "passed", "failed", "rounds", "round"]
STOP_WORDS = set("""
a an the of in on at to for from by with and or but nor vs versus than as is are was were be been
being it its this that these those each every per all any no not one two three only also then so
into over under between against after before about up down out same both new old when while which
who what where how there here their they we our more most less least very just still now through
within without around among via etc ie eg do does did has have had can could would should will may
must if else such whose them once twice again near own got gave give gives read reads session
sessions log logs run runs went ended ends took since left latest earlier later below above figure
figures value values gpudash gpu gpus h200 nvidia""".split())
STOP_WORDS |= {u.lower() for u in UNITS} | {w.lower() for w in COUNT_WORDS}
LABELS = 3  # label words per figure
BENCHMARK_SCOPE = {"docs/BENCHMARKS.md": None, "README.md": "Figures"}  # None: the whole file
HISTORY_SCOPE = {"docs/CHANGELOG.md"}  # rules 1 and 2 only: rule 3 never applies here
MARKER = re.compile(r"\b(?:no log|without a log|not measured)\b", re.IGNORECASE)
LOG_ROOT = "runs"  # under docs/: one folder per area, the logs in them

UNIT_RE = "|".join(re.escape(u) for u in UNITS)
COUNT_RE = "|".join(COUNT_WORDS)
# A number: thousands-grouped or plain digits, an optional fraction; not after a word character or
# a dot (no "H200", no "1.2" inside "v1.2.3"); "after" catches a third part (a version, an address).
NUMBER = re.compile(r"(?<![\w.])(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?P<after>(?:\.\d)?)")
UNIT_AFTER = re.compile(r" ?(?P<u>" + UNIT_RE + r")(?![A-Za-z0-9_/])")
COUNT_AFTER = re.compile(r" (?P<c>" + COUNT_RE + r")(?![A-Za-z])")
LOG_COUNT_AFTER = re.compile(r" ?(?P<c>" + COUNT_RE + r")(?![A-Za-z])", re.IGNORECASE)
SKIP_BEFORE = re.compile(r"(?:§|#|\bv|\bversion |\bCUDA |\bissues? |\bsections? )$", re.IGNORECASE)
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
LOG_UNIT = re.compile(r"(?<![A-Za-z])(?:" + UNIT_RE + r")(?![A-Za-z])")
# A name ends where no word character and no ".word" follows: "p2p.log." at a sentence's end counts.
# "old" or a missing "area" is a path of the old layout (rule 1 reports it).
LOG_PATH = re.compile(
    r"(?<![\w\-])(?:docs/)?(?:(?P<old>gpu-runs|bench-runs)/|runs/(?:(?P<area>[\w*\-]+)/)?)"
    r"(?P<name>[\w*.\-]+?\.(?:log|txt))(?!\w|\.\w)"
)
BARE_LOG = re.compile(r"(?<![\w/.\-])(?P<name>[\w\-]+(?:\.[\w\-]+)*?\.(?:log|txt))(?!\w|\.\w)")
CODE_SPAN = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
URL = re.compile(r"https?://\S+")
LOG_TOKEN = re.compile(r"\d[\d.,]*")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")


def same_unit(unit: str) -> str:
    return SAME_UNIT.get(unit, unit)


def count_word(word: str) -> str:
    return "round" if word.lower() == "rounds" else word.lower()


def sign_before(text: str, start: int) -> str:
    """'+' or '-' when a sign stands right before text[start], not after a letter or digit; else ''."""
    if start == 0 or text[start - 1] not in "+-−" or (start >= 2 and text[start - 2].isalnum()):
        return ""
    return "+" if text[start - 1] == "+" else "-"


def normalize(num: str) -> str:
    """Thousands commas out, trailing zeros after the point out: '1,750.50' -> '1750.5'."""
    num = num.replace(",", "")
    if "." in num:
        num = num.rstrip("0").rstrip(".")
    return num or "0"


@dataclass
class Figure:
    """A figure of a doc: as written, its number (normalized), unit or count word, sign, labels."""

    written: str
    num: str
    unit: str = ""
    count: bool = False
    sign: str = ""
    labels: list[str] = field(default_factory=list)
    lead: list[str] = field(default_factory=list)  # its table row's or list item's first words
    line: int = 0


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
            in_fence, cur = not in_fence, None
        elif in_fence:
            out.append(Passage("fence", [(no, line)]))
        elif not stripped:
            cur = None
        elif stripped.startswith(("#", "|")):
            out.append(Passage("heading" if stripped[0] == "#" else "row", [(no, line)]))
            cur = None
        elif LIST_ITEM.match(line) or cur is None:
            cur = Passage("item" if LIST_ITEM.match(line) else "paragraph", [(no, line)])
            out.append(cur)
        else:
            cur.lines.append((no, line))
    return out


def scrub(text: str, code: bool = False) -> str:
    """The text with code spans, link targets, URLs and log names blanked (the same length). With
    code, a code span keeps its text: its words are labels, its numbers never figures."""

    def blank(m: re.Match[str]) -> str:
        return " " * len(m.group(0))

    if code:
        text = CODE_SPAN.sub(lambda m: " " + m.group(0)[1:-1].replace("|", " ") + " ", text)
    text = LINK_TARGET.sub(lambda m: "]" + blank(m)[1:], CODE_SPAN.sub(blank, text))
    return BARE_LOG.sub(blank, LOG_PATH.sub(blank, URL.sub(blank, text)))


def line_figures(text: str) -> list[tuple[int, int, Figure]]:
    """The figures of one scrubbed line, as (start, end, figure), in order."""
    found = []
    for m in NUMBER.finditer(text):
        num, end = m.group("num"), m.end("num")
        if m.group("after") or SKIP_BEFORE.search(text[: m.start()]):
            continue
        unit = UNIT_AFTER.match(text, end)
        count = COUNT_AFTER.match(text, end) if "." not in num and unit is None else None
        if "." not in num and unit is None and count is None:
            continue  # an integer with no unit: a date, a size, a name's part (5892a95, 4096x)
        tail = unit or count
        sign = sign_before(text, m.start())
        fig = Figure(
            text[m.start() - bool(sign) : tail.end() if tail else end],
            normalize(num),
            same_unit(unit.group("u")) if unit else count_word(count.group("c")) if count else "",
            count is not None,
            sign,
        )
        found.append((m.start(), tail.end() if tail else end, fig))
    return found


def figures(text: str) -> list[str]:
    """The figures of a text as written (no labels): for a quick look and the tests."""
    return [f.written for _, _, f in line_figures(scrub(text))]


def passage_figures(p: Passage) -> list[Figure]:
    """The figures of a passage, each with its line number and labels (see the module doc)."""
    out: list[Figure] = []
    pending: list[str] = []  # label words since the last decimal or count, in this cell
    last: list[str] = []  # the previous figure's labels, in this cell
    waiting: list[Figure] = []  # a figure with no label yet takes the words after it
    lead: list[str] = []  # the first cell's (a row) or the item's first words
    cell = 0
    for no, raw in p.lines:
        text, words = scrub(raw), scrub(raw, code=True)
        found = line_figures(text)
        events: list[tuple[int, str, object]] = [(s, "figure", f) for s, _, f in found]
        for m in WORD.finditer(words):
            glued = m.start() > 0 and (words[m.start() - 1].isdigit() or words[m.start() - 1] in "_.")
            if not glued and not any(s <= m.start() < e for s, e, _ in found):
                events.append((m.start(), "word", m.group(0)))
        if p.kind == "row":
            events += [(i, "cell", None) for i, ch in enumerate(text) if ch == "|"]
        for _, kind, value in sorted(events, key=lambda e: e[0]):
            if kind == "cell":
                cell += 1
                pending, last, waiting = [], [], []
            elif kind == "word":
                word = str(value)
                if len(word) < 2 or word.lower() in STOP_WORDS:
                    continue
                pending.append(word)
                if (cell == 1 or p.kind == "item") and len(lead) < LABELS:
                    lead.append(word)
                for f in waiting:
                    if len(f.labels) < LABELS:
                        f.labels.append(word)
            else:
                fig = value
                assert isinstance(fig, Figure)
                fig.line, fig.labels = no, list(pending[-LABELS:] or last)
                waiting, last = ([] if fig.labels else waiting + [fig]), fig.labels
                if "." in fig.written or fig.count:  # a measurement; "1 MiB" may be part of a label
                    pending = []
                if p.kind == "item" or (p.kind == "row" and cell > 1):
                    fig.lead = lead
                out.append(fig)
    return out


def tokens(line: str) -> list[tuple[str, str, str, str]]:
    """The numbers of a log line: (normalized, sign, unit right after it, count word right after)."""
    out = []
    for m in LOG_TOKEN.finditer(line):
        tok = m.group(0).rstrip(".,")
        unit = UNIT_AFTER.match(line, m.start() + len(tok))
        count = LOG_COUNT_AFTER.match(line, m.start() + len(tok))
        u = same_unit(unit.group("u")) if unit else ""
        c = count_word(count.group("c")) if count else ""
        sign = sign_before(line, m.start()) or "+"
        for part in {tok, *tok.split(",")}:
            if part and part.count(".") <= 1:
                out.append((normalize(part), sign, u, c))
    return out


class Log:
    """One log: its lines, where each number occurs, and each line's header and title."""

    def __init__(self, path: str) -> None:
        with open(path, encoding="utf-8", errors="replace") as f:
            self.lines = f.read().splitlines()
        self.lower = [line.lower() for line in self.lines]
        self.index: dict[str, list[tuple[int, str, str, str]]] = {}
        self.header: list[int] = []
        self.title: list[int] = []
        header = title = 0
        for i, line in enumerate(self.lines):
            if not line.strip():
                header = i + 1
            elif re.search(r"[A-Za-z]", line) and not re.search(r"\d", line):
                header = i
            if line.lstrip().startswith(("==", "#")):
                title = i
            self.header.append(header)
            self.title.append(title)
            for num, sign, unit, count in tokens(line):
                self.index.setdefault(num, []).append((i, sign, unit, count))

    def context(self, i: int) -> tuple[int, int, int]:
        """Line i, its header and its title (see the module doc)."""
        return i, self.header[i], self.title[i]

    def has_unit(self, i: int, unit: str) -> bool:
        return any(unit in {same_unit(u) for u in LOG_UNIT.findall(self.lines[j])} for j in self.context(i))

    def labelled(self, i: int, labels: list[str], count: bool = False) -> bool:
        """Whether a label is in line i's context (a count's: line i alone)."""
        text = self.lower[i] if count else "\n".join(self.lower[j] for j in self.context(i))
        stems = [w[:-1] if len(w) > 3 and w.endswith("s") else w for w in (x.lower() for x in labels)]
        return any(re.search(r"(?<![a-z0-9])" + re.escape(stem), text) for stem in stems)

    def match(self, fig: Figure) -> int:
        """How far the figure got on its best line: 4 held; 3 all but the label; 2 the number and
        its sign, not the unit or count word; 1 the number, not its sign; 0 not the number."""
        best = 0
        for i, sign, unit, count in self.index.get(fig.num, ()):
            if fig.sign and sign != fig.sign:
                best = max(best, 1)
            elif fig.count and count != fig.unit or not fig.count and fig.unit and unit and unit != fig.unit:
                best = max(best, 2)
            elif not fig.count and fig.unit and not unit and not self.has_unit(i, fig.unit):
                best = max(best, 2)
            elif (fig.labels or fig.lead) and not self.labelled(i, fig.labels + fig.lead, fig.count):
                best = max(best, 3)
            else:
                return 4
        return best


WHY = {
    0: "is not in",
    1: "has the other sign in",
    2: "has another unit or count word in",
    3: "is on no line of",
}


@dataclass
class Offence:
    """One thing the check failed on, printed as file:line: message."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def cited_logs(passage: Passage, docs_dir: str, rel: str) -> tuple[list[str], list[Offence]]:
    """The log files a passage names, and an offence for every path that matches no file."""
    logs: list[str] = []
    missing: list[Offence] = []
    for no, line in passage.lines:
        for m in LOG_PATH.finditer(line):
            name, area = m.group("name"), m.group("area")
            if m.group("old") or not area:
                path = m.group(0) if m.group(0).startswith("docs/") else "docs/" + m.group(0)
                missing.append(Offence(f"{rel}:{no}", f"{path} is not a docs/{LOG_ROOT}/AREA/ path"))
                continue
            hits = sorted(glob.glob(os.path.join(docs_dir, LOG_ROOT, area, name)))
            if not hits:
                missing.append(Offence(f"{rel}:{no}", f"docs/{LOG_ROOT}/{area}/{name} does not exist"))
            logs.extend(h for h in hits if h not in logs)
        for m in BARE_LOG.finditer(LOG_PATH.sub(" ", line)):
            for path in sorted(glob.glob(os.path.join(docs_dir, LOG_ROOT, "*", glob.escape(m.group("name"))))):
                if os.path.isfile(path) and path not in logs:
                    logs.append(path)
    return logs, missing


LOGS: dict[tuple[str, int, int], Log] = {}  # read once per path, size and modification time


def load(path: str) -> Log:
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    if key not in LOGS:
        LOGS[key] = Log(path)
    return LOGS[key]


def check(
    root: str, stats: dict[str, int] | None = None, only: list[str] | None = None
) -> tuple[list[Offence], int]:
    """Checks every doc under root (or only those named, relative to root); returns the offences and
    how many figures were checked. Fills stats (if given): checked, counts, passages, marked, unchecked,
    history (figures of HISTORY_SCOPE passages that name no log)."""
    docs_dir = os.path.join(root, "docs")
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(docs_dir, "*.md")))
    if only is not None:
        docs = [os.path.join(root, rel) for rel in only]
    offences: list[Offence] = []
    stats = {} if stats is None else stats
    for key in ("checked", "counts", "passages", "marked", "unchecked", "history"):
        stats[key] = 0
    for doc in filter(os.path.isfile, docs):
        rel = os.path.relpath(doc, root).replace(os.sep, "/")
        history = rel in HISTORY_SCOPE  # rules 1 and 2 only, whatever BENCHMARK_SCOPE says
        scope = "" if history else BENCHMARK_SCOPE.get(rel, "")
        in_scope, scope_level, heading_marked = scope is None, 0, False
        with open(doc, encoding="utf-8") as f:
            parts = passages(f.read())
        # What a paragraph gives the table, list or fence just below it: logs, whether it named any
        # (a passage citing only missing logs is checked, and fails), whether it is marked.
        block: tuple[list[str], bool, bool] = ([], False, False)
        prev: tuple[Passage, list[str], bool, bool] | None = None
        for p in parts:
            if p.kind == "heading":
                title = p.text().strip()
                level = len(title) - len(title.lstrip("#"))
                heading_marked = bool(MARKER.search(title))
                if scope and title.lstrip("#").strip() == scope:
                    in_scope, scope_level = True, level
                elif scope and in_scope and level <= scope_level:
                    in_scope = False
            logs, missing = cited_logs(p, docs_dir, rel)
            offences.extend(missing)
            cites, marked = bool(logs or missing), bool(MARKER.search(p.text())) or heading_marked
            if p.kind in ("row", "item", "fence") and (prev is None or prev[0].kind != p.kind):
                block = ([], False, False)  # a new block: does the passage just above introduce it?
                if prev is not None and prev[0].kind == "paragraph":
                    if p.kind != "item" or prev[0].text().rstrip().endswith(":"):
                        block = prev[1:]
            prev = (p, logs, cites, marked)
            if p.kind in ("row", "item", "fence") and not cites:
                logs, cites, marked = block[0], block[1], marked or block[2]
            figs = passage_figures(p)
            if not figs:
                continue
            if not cites:
                if in_scope and not marked and p.kind != "heading":
                    shown = ", ".join(repr(f.written) for f in figs[:3]) + (", ..." if figs[3:] else "")
                    offences.append(Offence(f"{rel}:{p.lines[0][0]}", f"a benchmark passage with figures "
                                            f"({shown}) names no log: cite its log or mark it 'no log'"))
                elif in_scope and marked:
                    stats["marked"] += len(figs)
                elif history:
                    stats["history"] += len(figs)
                elif not in_scope:
                    stats["unchecked"] += len(figs)
                continue
            stats["passages"] += 1
            names = ", ".join("docs/" + os.path.relpath(path, docs_dir).replace(os.sep, "/") for path in logs)
            for fig in figs:
                stats["checked"] += 1
                stats["counts"] += fig.count
                if not logs:
                    offences.append(Offence(f"{rel}:{fig.line}", f"{fig.written!r}: its log does not exist"))
                    continue
                best = max(load(path).match(fig) for path in logs)
                if best < 4:
                    why = f"{fig.written!r} {WHY[best]} {names}"
                    if best == 3:
                        why += " with its label " + "/".join(repr(w) for w in fig.labels + fig.lead)
                    offences.append(Offence(f"{rel}:{fig.line}", why))
    return offences, stats["checked"]


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(here), help="the repository (default: this one)")
    args = ap.parse_args()
    stats: dict[str, int] = {}
    offences, checked = check(args.root, stats)
    for o in offences:
        print(o)
    summary = (
        f"{checked} figures checked ({stats['counts']} counts) in {stats['passages']} passages; "
        f"{stats['marked']} figures in benchmark passages marked as not from a log; "
        f"{stats['unchecked']} figures outside benchmark passages name no log (not checked); "
        f"{stats['history']} figures of the history ({', '.join(sorted(HISTORY_SCOPE))}) name no log "
        f"(rule 3 does not apply there)"
    )
    if offences:
        print(f"docs_figures: {len(offences)} offence(s); {summary}", file=sys.stderr)
        return 1
    print(f"docs_figures: {summary}; each held by a line of its log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
