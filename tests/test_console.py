"""What a stage prints: no library noise that says nothing about the run, and progress bars that end cleanly in a log
file (the pipeline line is checked on a real `dvc repro` in tests/test_smoke_dag.py)."""

from __future__ import annotations

import subprocess
import sys

IMPORT_TORCHAO = (
    "import torchao, logging; from transformers.quantizers import quantizer_torchao; "
    "logging.getLogger('torchao').warning('torchao: another warning')"
)


def _stderr(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr


def test_known_library_noise_is_dropped_and_nothing_else():
    loud = _stderr(IMPORT_TORCHAO)
    assert "Failed to load" in loud and "register_constant() on Enum subclasses" in loud  # what a stage used to print
    quiet = _stderr("from a5core.stage.entry import quiet_known_noise; quiet_known_noise(); " + IMPORT_TORCHAO)
    assert "Failed to load" not in quiet and "register_constant" not in quiet, quiet
    assert "torchao: another warning" in quiet  # any other warning of the same logger still shows


def test_a_progress_bar_in_a_log_file_ends_its_line(tmp_path):
    log = tmp_path / "log"
    code = (
        "from a5core.base.progress import bar\n"
        "b = bar(3, 'grading')\n"
        "for _ in range(3): b.update()\n"
        "b.close(); import sys; print('next message', file=sys.stderr)\n"
    )
    with open(log, "w") as f:  # not a terminal, as under `dvc repro > log`
        subprocess.run([sys.executable, "-c", code], stderr=f, check=True)
    lines = log.read_text().split("\n")
    assert "next message" in lines, lines
    assert "grading: 100%" in lines[lines.index("next message") - 1]  # the bar's last state, on a line of its own
