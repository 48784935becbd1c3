"""Tests of tests/docs_figures.py: it passes what a log holds and catches what it does not.

Two parts: small made-up trees, one rule at a time; and a copy of this repository's docs and logs
into which each kind of error is planted, one at a time, in a real passage the check accepts as it is
(the unplanted copy must pass, and every planted copy must fail with that error).

Runs under pytest or alone: `python3 tests/test_docs_figures.py`.
"""

import os
import shutil
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import docs_figures  # noqa: E402

ROOT = os.path.dirname(HERE)

LOG = """figure                      gpudash   PyTorch unit    ratio  verdict
GPU0->GPU1 1 GiB one way     396.42    381.84 GB/s    1.038  PASS
GPU0<->GPU1 1 GiB both ways  781.24    715.26 GB/s    1.092  FAIL
bf16 GEMM: NVML utilization.gpu 31%, SM activity 96.34%
driver 580.159.04  CUDA 13.0  interval 200 ms
p50 1.9 ms
p99 2.4 ms
fast path 12.5 µs, free 9.5 MiB
energy estimate -0.04% off; step time +0.05% with the client
lab vs PyTorch: 39 PASS, 0 FAIL/MISSING, 1 INCONCLUSIVE; 13 rounds in 166 s
  pinned copies: 3 rounds; 12 passed, 0 failed

== latency (µs)
call                 median
kernel launch         2.73
"""


class MadeUp(unittest.TestCase):
    """One rule at a time, on a repository with one log, docs/runs/gpu/run.log."""

    def tree(self, readme: str, benchmarks: str = "", other: str = "", changelog: str = "") -> str:
        root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, root)
        os.makedirs(os.path.join(root, "docs", "runs", "gpu"))
        for rel, text in [("docs/runs/gpu/run.log", LOG), ("README.md", readme),
                          ("docs/BENCHMARKS.md", benchmarks), ("docs/OTHER.md", other),
                          ("docs/CHANGELOG.md", changelog)]:
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
        return root

    def messages(self, readme: str, benchmarks: str = "", other: str = "", changelog: str = "") -> list[str]:
        return [str(o) for o in docs_figures.check(self.tree(readme, benchmarks, other, changelog))[0]]

    def test_a_passage_the_log_holds_passes(self):
        stats: dict[str, int] = {}
        found, checked = docs_figures.check(self.tree(
            "Both ways 781.24 GB/s against 715.26, 1.092 FAIL; util 31 %, SM activity 96.340%; "
            "sampling interval 200 ms; lab: 39 PASS, 1 INCONCLUSIVE in 13 rounds; kernel launch 2.73 µs "
            "([log](docs/runs/gpu/run.log)).\n"), stats)
        self.assertEqual([str(o) for o in found], [])
        self.assertEqual((checked, stats["counts"]), (10, 3))

    def test_a_planted_figure_is_caught_with_file_line_and_log(self):
        self.assertEqual(
            self.messages("Intro.\n\nBoth ways 750.0 GB/s, 1.042 (docs/runs/gpu/run.log).\n"),
            ["README.md:3: '750.0 GB/s' is not in docs/runs/gpu/run.log",
             "README.md:3: '1.042' is not in docs/runs/gpu/run.log"],
        )

    def test_rounding_is_caught(self):
        found = self.messages("Util 32 %, SM activity 96.3% ([log](docs/runs/gpu/run.log)).\n")
        self.assertEqual(len(found), 2, found)
        self.assertIn("'32 %' is not in", found[0])
        self.assertIn("'96.3%' is not in", found[1])

    def test_a_figure_must_be_on_a_line_with_its_label(self):
        # 1.9 is on the log's p50 line, 2.4 on its p99 line; swapped, neither is on a line with its label.
        self.assertEqual(self.messages("Span p50 1.9 ms, p99 2.4 ms (docs/runs/gpu/run.log).\n"), [])
        found = self.messages("Span p50 2.4 ms, p99 1.9 ms (docs/runs/gpu/run.log).\n")
        self.assertEqual(len(found), 2, found)
        self.assertEqual(found[0], "README.md:1: '2.4 ms' is on no line of docs/runs/gpu/run.log "
                                   "with its label 'Span'/'p50'")
        # 396.42 is the one-way figure: labelled "both directions" it is on no line of the log.
        found = self.messages("Both directions 396.42 GB/s (docs/runs/gpu/run.log).\n")
        self.assertEqual(len(found), 1, found)
        self.assertIn("is on no line of", found[0])

    def test_a_unit_must_be_the_one_the_log_gives(self):
        self.assertEqual(self.messages("Fast path 12.5 us, free 9.5 MiB (docs/runs/gpu/run.log).\n"), [])
        found = self.messages("Fast path 12.5 ns, free 9.5 MB (docs/runs/gpu/run.log).\n")
        self.assertEqual(len(found), 2, found)
        self.assertIn("'12.5 ns' has another unit", found[0])
        self.assertIn("'9.5 MB' has another unit", found[1])
        # A bare number in the log: the unit must be on its line, its table header or its title.
        self.assertEqual(self.messages("Kernel launch 2.73 µs (docs/runs/gpu/run.log).\n"), [])
        found = self.messages("Kernel launch 2.73 ms (docs/runs/gpu/run.log).\n")
        self.assertIn("'2.73 ms' has another unit", found[0])

    def test_a_signed_figure_must_have_the_log_sign(self):
        ok = "Energy estimate −0.04%, step time +0.05% (docs/runs/gpu/run.log).\n"
        self.assertEqual(self.messages(ok), [])
        found = self.messages("Energy estimate +0.04%, step time -0.05% (docs/runs/gpu/run.log).\n")
        self.assertEqual(len(found), 2, found)
        self.assertIn("'+0.04%' has the other sign", found[0])
        self.assertIn("'-0.05%' has the other sign", found[1])
        # Unsigned in the doc: not compared; unsigned in the log: positive.
        self.assertEqual(self.messages("The estimate 0.04%; util +31 % (docs/runs/gpu/run.log).\n"), [])

    def test_counts_must_have_the_same_word_and_number_on_a_labelled_line(self):
        ok = ("Lab vs PyTorch: 39 PASS, 0 FAIL, 1 INCONCLUSIVE, 13 rounds; pinned copies 12 passed "
              "(docs/runs/gpu/run.log).\n")
        self.assertEqual(self.messages(ok), [])
        for wrong, expect in [
            ("39 PASS", "'41 PASS' is not in"),
            ("13 rounds", "'3 rounds' is on no line of"),
            ("12 passed", "'12 rounds' has another unit or count word"),
        ]:
            planted = ok.replace(wrong, expect.split("'")[1])
            self.assertTrue(any(expect in m for m in self.messages(planted)), (planted, expect))

    def test_a_missing_log_is_caught_and_its_table_too(self):
        found = self.messages(
            "",
            "`bash p2p.sh` (log: docs/runs/gpu/p2p.log):\n\n"
            "| figure | gpudash | PyTorch |\n| --- | --- | --- |\n"
            "| both ways | 781.3 GB/s | 750.0 |\n",
        )
        self.assertIn("docs/BENCHMARKS.md:1: docs/runs/gpu/p2p.log does not exist", found)
        self.assertIn("docs/BENCHMARKS.md:5: '781.3 GB/s': its log does not exist", found)
        self.assertIn("docs/BENCHMARKS.md:5: '750.0': its log does not exist", found)

    def test_a_table_takes_the_log_of_its_intro_and_a_later_paragraph_does_not(self):
        found = self.messages(
            "As [run.log](docs/runs/gpu/run.log) prints it:\n\n| a | b |\n| --- | --- |\n"
            "| one way | 396.42 |\n| one way | 396.1 |\n\nOn the VM: 12.5 ms.\n"
        )
        self.assertEqual(found, ["README.md:6: '396.1' is not in docs/runs/gpu/run.log"])

    def test_a_list_takes_the_log_of_a_paragraph_that_introduces_it(self):
        found = self.messages(
            "Run ([log](docs/runs/gpu/run.log)), new since then:\n- one way 396.42\n- both 1.042\n\n"
            "Run ([log](docs/runs/gpu/run.log)).\n- on the VM 12.5 ms\n"
        )
        self.assertEqual(found, ["README.md:3: '1.042' is not in docs/runs/gpu/run.log"])

    def test_globs_and_bare_names_of_existing_logs_count(self):
        self.assertEqual(self.messages("Logs in docs/runs/gpu/r*.log: ratio 1.092. And run.log: 1.5.\n"),
                         ["README.md:1: '1.5' is not in docs/runs/gpu/run.log"])
        self.assertEqual(self.messages("Logs in docs/runs/gpu/none-*.log.\n"),
                         ["README.md:1: docs/runs/gpu/none-*.log does not exist"])
        # A "*" in the area: every area's logs whose name matches.
        self.assertEqual(self.messages("Logs in runs/*/r*.log: ratio 1.092, 1.5.\n"),
                         ["README.md:1: '1.5' is not in docs/runs/gpu/run.log"])
        self.assertEqual(self.messages("Logs in runs/lab/r*.log.\n"),
                         ["README.md:1: docs/runs/lab/r*.log does not exist"])

    def test_a_path_of_the_old_layout_is_an_offence(self):
        # The logs live in docs/runs/AREA/ only: gpu-runs/, bench-runs/ and runs/ with no area are gone.
        for old in ("docs/gpu-runs/run.log", "gpu-runs/run.log", "bench-runs/run.log", "docs/runs/run.log",
                    "runs/run.log"):
            path = old if old.startswith("docs/") else "docs/" + old
            with self.subTest(old):
                self.assertEqual(self.messages(f"Both ways 781.24 GB/s ([log]({old})).\n"), [
                    f"README.md:1: {path} is not a docs/runs/AREA/ path",
                    "README.md:1: '781.24 GB/s': its log does not exist"])

    def test_a_benchmark_passage_must_name_its_log_or_say_it_has_none(self):
        uncited = "The sampler costs 8.5 µs.\n"
        self.assertEqual(self.messages("", uncited), [
            "docs/BENCHMARKS.md:1: a benchmark passage with figures ('8.5 µs') names no log: "
            "cite its log or mark it 'no log'"])
        self.assertEqual(self.messages("", "The sampler costs 8.5 µs (no log).\n"), [])
        table = "Targets, not measured:\n\n| a | b |\n| --- | --- |\n| x | 8 ms |\n"
        self.assertEqual(self.messages("", table), [])
        self.assertEqual(self.messages("", "## On the VM, no log\n\n" + uncited + "\n## Next\n\n" + uncited),
                         [m.replace(":1:", ":7:") for m in self.messages("", uncited)])
        # README: only its "Figures" section counts; other docs are not checked without a log.
        readme = "# x\n\n" + uncited + "\n## Figures\n\n" + uncited + "\n## API\n\n" + uncited
        expected = [m.replace("docs/BENCHMARKS.md:1", "README.md:7") for m in self.messages("", uncited)]
        self.assertEqual(self.messages(readme), expected)
        self.assertEqual(self.messages("", "", uncited), [])

    def test_the_changelog_gets_rules_1_and_2_and_not_rule_3(self):
        uncited = "The sampler costs 8.5 µs.\n"
        stats: dict[str, int] = {}
        found, _ = docs_figures.check(self.tree("", "", "", "# Changelog\n\n## Session 1\n\n" + uncited), stats)
        self.assertEqual([str(o) for o in found], [])  # rule 3: a history passage need not name a log
        self.assertEqual(stats["history"], 1)
        # Rule 2 holds there as anywhere: a named log must hold the passage's figures.
        self.assertEqual(self.messages("", "", "", "Both ways 750.0 GB/s ([log](runs/gpu/run.log)).\n"),
                         ["docs/CHANGELOG.md:1: '750.0 GB/s' is not in docs/runs/gpu/run.log"])
        self.assertEqual(self.messages("", "", "", "Both ways 781.24 GB/s ([log](runs/gpu/run.log)).\n"), [])
        # Rule 1 too: the log it names exists.
        self.assertEqual(self.messages("", "", "", "Old run ([log](runs/gpu/gone.log)).\n"),
                         ["docs/CHANGELOG.md:1: docs/runs/gpu/gone.log does not exist"])
        # The scope is explicit: even a BENCHMARK_SCOPE naming the changelog does not bring rule 3 there.
        with mock.patch.dict(docs_figures.BENCHMARK_SCOPE, {"docs/CHANGELOG.md": None}):
            self.assertEqual(self.messages("", "", "", uncited), [])
        self.assertIn("names no log", self.messages("", uncited)[0])  # while BENCHMARKS.md gets it

    def test_versions_dates_hashes_names_and_code_are_not_figures(self):
        self.assertEqual(
            docs_figures.figures(
                "2026-12-01 at 5892a95, PyTorch 2.11.0, CUDA 13.0, H200 fp16 x16, issue 15, "
                "`--interval 1.5`, 8192×8192, [log](runs/lab/session9-lab.log), 4 identity checks"
            ),
            [],
        )
        self.assertEqual(
            docs_figures.figures(
                "4,466 µs, +0.05%, −0.29%, 0.818–0.928, 1.5x, 20 GiB, 5 seconds, 39 PASS, 3 rounds"
            ),
            ["4,466 µs", "+0.05%", "−0.29%", "0.818", "0.928", "1.5x", "20 GiB", "39 PASS", "3 rounds"],
        )

    def test_an_integer_with_a_unit_needs_the_unit_on_the_same_log_line(self):
        self.assertEqual(self.messages("Interval 200 ms and 200 W ([log](docs/runs/gpu/run.log)).\n"),
                         ["README.md:1: '200 W' has another unit or count word in docs/runs/gpu/run.log"])


B = "docs/BENCHMARKS.md"
C = "docs/CHANGELOG.md"
# (kind, file, the passage's text, the same with the error, what the check must say). Each text is in
# a passage the check accepts; if a doc is rewritten, pick another passage of the same kind. Most are in
# BENCHMARKS.md (the current figures); those in CHANGELOG.md show that rules 1 and 2 hold in the history.
PLANTS = [
    ("1 a changed decimal still present elsewhere in the same log (another row's figure)", C,
     "| process utilization (slow) | 1924.9 µs | 962.4 µs |",
     "| process utilization (slow) | 1924.9 µs | 1448.6 µs |", "'1448.6 µs' is on no line of"),
    ("2 µs -> ns", B, "the GPM sample itself (507.8 µs a call under the job)",
     "the GPM sample itself (507.8 ns a call under the job)", "'507.8 ns' has another unit"),
    ("3 a sign flip", B, "| +0.01% (10.596 → 10.597 ms) |",
     "| −0.01% (10.596 → 10.597 ms) |", "'−0.01%' has the other sign"),
    ("4 39 PASS -> 42 PASS", B, "**39 PASS, 0 FAIL, 0 INCONCLUSIVE, exit 0** in 23 rounds",
     "**42 PASS, 0 FAIL, 0 INCONCLUSIVE, exit 0** in 23 rounds", "'42 PASS' is not in"),
    ("5 23 rounds -> 3 rounds", B, "exit 0** in 23 rounds", "exit 0** in 3 rounds", "'3 rounds' is on no line of"),
    ("6 a changed decimal that is in no log", B, "its sampler's sum was 1625.8 µs",
     "its sampler's sum was 1625.9 µs", "'1625.9 µs' is not in"),
    ("7 MiB -> MB", B, "the same build held 31.0 MiB (", "the same build held 31.0 MB (",
     "'31.0 MB' has another unit"),
    ("8 two figures swapped between their labels", B, "idle_held 2.0, gpu_free 1.3 and",
     "idle_held 1.3, gpu_free 2.0 and", "'1.3' is on no line of"),
    ("9 a link to a log that does not exist", B,
     "The latest, [session9-alerts.log](runs/gpu/session9-alerts.log):",
     "The latest, [session9-alerts.log](runs/gpu/session9-alert.log):",
     "docs/runs/gpu/session9-alert.log does not exist"),
    ("10 a figure attributed to the wrong log", B,
     "against 21709 | `bash tests/gpu/h200.sh` ([log](runs/gpu/session9-h200.log))",
     "against 21709 | `bash tests/gpu/h200.sh` ([log](runs/gpu/h200-check.log))",
     "'21708.8 MiB' is not in docs/runs/gpu/h200-check.log"),
    ("11 a percent written as a ratio", B, "the calibrated load read 9.84%, 49.95%",
     "the calibrated load read 9.84%, 0.4995", "'0.4995' is not in"),
    ("12 a changed integer with a unit", B, "nvidia-smi at 100 ms costs 167 µs per GPU",
     "nvidia-smi at 100 ms costs 176 µs per GPU", "'176 µs' is not in"),
    ("13 the log citation removed from a benchmark passage", B,
     "What is left in the binary on a real GPU ([session19-pages.log](runs/rss/session19-pages.log), from",
     "What is left in the binary on a real GPU (from", "names no log"),
    ("14 a figure copied from the next line of the log", B,
     "| wall per GPU, median / p99 / max | **8.3 / 14.2 / 21.5 µs** |",
     "| wall per GPU, median / p99 / max | **8.3 / 8.67 / 21.5 µs** |", "'8.67' is on no line of"),
    ("15 a log figure rounded", B, "gpudash 781.24 GB/s, PyTorch 715.26, 1.092;",
     "gpudash 781.2 GB/s, PyTorch 715.26, 1.092;", "'781.2 GB/s' is not in"),
    ("16 a log path of the old layout", B, "[session19-h200.log](runs/gpu/session19-h200.log)",
     "[session19-h200.log](gpu-runs/session19-h200.log)",
     "docs/gpu-runs/session19-h200.log is not a docs/runs/AREA/ path"),
    ("17 a changed decimal in the history", C, "a sum at the default 1 s of 1656.7 µs",
     "a sum at the default 1 s of 1665.7 µs", "'1665.7 µs' is not in"),
]


class PlantedInTheRealDocs(unittest.TestCase):
    """Each kind of error planted, one at a time, into a copy of this repository's docs and logs."""

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp()
        shutil.copy2(os.path.join(ROOT, "README.md"), cls.root)
        shutil.copytree(os.path.join(ROOT, "docs"), os.path.join(cls.root, "docs"),
                        ignore=shutil.ignore_patterns("*.png", "grafana"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root)

    def planted(self, rel: str, old: str, new: str) -> list[str]:
        """The offences of one doc with old replaced by new; the doc is put back after."""
        path = os.path.join(self.root, rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(text.count(old), 1, f"{rel} no longer holds this passage once: {old!r}")
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.replace(old, new))
            return [str(o) for o in docs_figures.check(self.root, only=[rel])[0]]
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)

    def test_the_unplanted_copy_passes(self):
        self.assertEqual([str(o) for o in docs_figures.check(self.root)[0]], [])

    def test_every_planted_error_is_caught(self):
        self.assertGreaterEqual(len(PLANTS), 12)
        for kind, rel, old, new, expect in PLANTS:
            with self.subTest(kind):
                found = self.planted(rel, old, new)
                self.assertTrue(any(expect in m for m in found), f"{kind}: missed; the check said {found}")

    def test_the_plants_are_the_kinds_they_claim(self):
        def log(rel: str) -> str:
            with open(os.path.join(self.root, "docs", "runs", rel), encoding="utf-8") as f:
                return f.read()

        self.assertIn("1448.6 µs", log("gpu/session12-h200.log"))  # 1: the planted decimal is in that log
        self.assertIn("device copies: 3 rounds", log("lab/session20-lab.log"))  # 5: so is "3 rounds"
        self.assertIn("8.67 µs", log("gpu/h200-check.log"))  # 14: and the figure of the next line
        self.assertIn("21708.8 MiB", log("gpu/session9-h200.log"))  # 10: the right log holds it

    def test_the_history_needs_no_log(self):
        """Rule 3 is not applied to CHANGELOG.md: a passage there whose citation is removed is not an offence."""
        old = "beside the job ([session12-h200.log](runs/gpu/session12-h200.log)): 42.1 MiB"
        self.assertEqual(self.planted(C, old, "beside the job: 42.1 MiB"), [])
        with mock.patch.dict(docs_figures.BENCHMARK_SCOPE, {C: None}):
            self.assertEqual(self.planted(C, old, "beside the job: 42.1 MiB"), [])

    def test_the_plants_fail_without_their_rule(self):
        """The test can fail: with labels ignored, or no benchmark scope, the plants they catch pass."""
        kinds = {p[0].split()[0]: p for p in PLANTS}
        with mock.patch.object(docs_figures.Log, "labelled", lambda *a, **k: True):
            for k in ("1", "5", "8", "14"):
                _, rel, old, new, expect = kinds[k]
                self.assertFalse(any(expect in m for m in self.planted(rel, old, new)), kinds[k][0])
        with mock.patch.dict(docs_figures.BENCHMARK_SCOPE, clear=True):
            _, rel, old, new, expect = kinds["13"]
            self.assertFalse(any(expect in m for m in self.planted(rel, old, new)))


if __name__ == "__main__":
    unittest.main()
