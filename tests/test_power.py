"""tools/power.py: the protocol grid, cheapest first, and what it says about a target difference."""

import subprocess
import sys

from a5core.base.stats import min_detectable_difference
from tools.power import grid


def test_grid_is_cheapest_first_and_uses_the_stats_formula():
    rows = grid(0.3, 0.02, questions=(64, 500), samples=(1, 4), seeds=(1, 3))
    assert [r["generations"] for r in rows] == sorted(r["generations"] for r in rows)
    r = next(r for r in rows if (r["questions"], r["samples"], r["seeds"]) == (500, 4, 3))
    assert r["resolves"] == min_detectable_difference(500, 4, 0.3, seeds=3, seed_sd=0.02)


def test_cli_lists_protocols_that_resolve_a_delta_or_says_none_does():
    run = [sys.executable, "-m", "tools.power", "--accuracy", "0.3"]
    out = subprocess.run([*run, "--delta", "0.1"], capture_output=True, text=True, check=True).stdout
    first = out.splitlines()[2].split("|")
    assert float(first[5]) <= 0.1  # the cheapest protocol that resolves 0.1
    out = subprocess.run([*run, "--delta", "0.01", "--seed-sd", "0.05"], capture_output=True, text=True).stdout
    assert "no protocol of the grid resolves" in out
    bad = subprocess.run([*run, "--delta", "2"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--delta" in bad.stderr
