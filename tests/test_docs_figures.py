"""Tests of tests/docs_figures.py: it passes figures a log holds and catches the ones it does not.

Runs under pytest or alone: `python3 tests/test_docs_figures.py`.
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import docs_figures  # noqa: E402

LOG = """figure                      gpudash   PyTorch unit    ratio  verdict
GPU0->GPU1 1 GiB one way     396.42    381.84 GB/s    1.038  PASS
GPU0<->GPU1 1 GiB both ways  781.24    715.26 GB/s    1.092  FAIL
bf16 GEMM: NVML utilization.gpu 31%, SM activity 96.34%
driver 580.159.04  CUDA 13.0  interval 200 ms
"""


class DocsFigures(unittest.TestCase):
    def tree(self, readme: str, benchmarks: str = "") -> str:
        """A repository with one log, docs/gpu-runs/run.log, and the two docs given."""
        root = tempfile.mkdtemp()
        os.makedirs(os.path.join(root, "docs", "gpu-runs"))
        with open(os.path.join(root, "docs", "gpu-runs", "run.log"), "w", encoding="utf-8") as f:
            f.write(LOG)
        with open(os.path.join(root, "README.md"), "w", encoding="utf-8") as f:
            f.write(readme)
        with open(os.path.join(root, "docs", "BENCHMARKS.md"), "w", encoding="utf-8") as f:
            f.write(benchmarks)
        return root

    def messages(self, readme: str, benchmarks: str = "") -> tuple[list[str], int]:
        offences, checked = docs_figures.check(self.tree(readme, benchmarks))
        return [str(o) for o in offences], checked

    def test_a_line_the_log_holds_passes(self):
        found, checked = self.messages(
            "Both ways 781.24 GB/s against 715.26, 1.092 FAIL; util 31 %, SM activity 96.340%; "
            "sampled every 200 ms ([log](docs/gpu-runs/run.log)).\n"
        )
        self.assertEqual(found, [])
        self.assertEqual(checked, 6)

    def test_a_planted_figure_is_caught_with_file_line_and_log(self):
        found, _ = self.messages("Intro.\n\nBoth ways 750.0 GB/s, 1.042 (docs/gpu-runs/run.log).\n")
        self.assertEqual(
            found,
            [
                "README.md:3: '750.0 GB/s' is not in docs/gpu-runs/run.log",
                "README.md:3: '1.042' is not in docs/gpu-runs/run.log",
            ],
        )

    def test_rounding_is_caught(self):
        found, _ = self.messages("Util 32 %, SM activity 96.3% ([log](docs/gpu-runs/run.log)).\n")
        self.assertEqual(len(found), 2, found)
        self.assertIn("'32 %'", found[0])
        self.assertIn("'96.3%'", found[1])

    def test_a_missing_log_is_caught_and_its_table_too(self):
        # The shape of the old P2P section: a paragraph naming a log that was never written, a table.
        found, _ = self.messages(
            "",
            "`bash p2p.sh` (log: docs/gpu-runs/p2p.log):\n\n"
            "| figure | gpudash | PyTorch |\n| --- | --- | --- |\n"
            "| both ways | 781.3 GB/s | 750.0 |\n",
        )
        self.assertIn("docs/BENCHMARKS.md:1: docs/gpu-runs/p2p.log does not exist", found)
        self.assertIn("docs/BENCHMARKS.md:5: '781.3 GB/s': its log does not exist", found)
        self.assertIn("docs/BENCHMARKS.md:5: '750.0': its log does not exist", found)

    def test_a_table_takes_the_log_of_its_intro_and_a_later_paragraph_does_not(self):
        found, _ = self.messages(
            "As [run.log](docs/gpu-runs/run.log) prints it:\n\n| a | b |\n| --- | --- |\n| x | 396.42 |\n"
            "| y | 396.1 |\n\nOn the VM: 12.5 ms.\n"
        )
        self.assertEqual(found, ["README.md:6: '396.1' is not in docs/gpu-runs/run.log"])

    def test_a_list_takes_the_log_of_a_paragraph_that_introduces_it(self):
        found, _ = self.messages(
            "Run ([log](docs/gpu-runs/run.log)), new since then:\n- one way 396.42\n- both 1.042\n\n"
            "Run ([log](docs/gpu-runs/run.log)).\n- on the VM 12.5 ms\n"
        )
        self.assertEqual(found, ["README.md:3: '1.042' is not in docs/gpu-runs/run.log"])

    def test_globs_and_bare_names_of_existing_logs_count(self):
        found, _ = self.messages("Logs in docs/gpu-runs/r*.log: 1.092. And run.log: 1.5.\n")
        self.assertEqual(found, ["README.md:1: '1.5' is not in docs/gpu-runs/run.log"])
        found, _ = self.messages("Logs in docs/gpu-runs/none-*.log.\n")
        self.assertEqual(found, ["README.md:1: docs/gpu-runs/none-*.log does not exist"])

    def test_versions_dates_hashes_names_and_code_are_not_figures(self):
        self.assertEqual(
            docs_figures.figures(
                "2026-12-01 at 5892a95, PyTorch 2.11.0, CUDA 13.0, H200 fp16 x16, issue 15, "
                "`--interval 1.5`, 8192×8192, [log](gpu-runs/session9-lab.log)"
            ),
            [],
        )
        self.assertEqual(
            docs_figures.figures("4,466 µs, +0.05%, −0.29%, 0.818–0.928, 1.5x, 20 GiB, 5 seconds"),
            ["4,466 µs", "0.05%", "0.29%", "0.818", "0.928", "1.5x", "20 GiB"],
        )

    def test_an_integer_with_a_unit_needs_the_unit_on_the_same_log_line(self):
        found, _ = self.messages("200 ms and 200 W ([log](docs/gpu-runs/run.log)).\n")
        self.assertEqual(found, ["README.md:1: '200 W' is not in docs/gpu-runs/run.log"])


if __name__ == "__main__":
    unittest.main()
