"""End to end on the smoke profile (tiny random model): `dvc repro` up to EI round 2 (as if stopped there),
`dvc repro` of the whole DAG (rounds 1-2 are not run again), a cached rerun, then
`dvc exp run -S` on a GRPO param (only GRPO and plots re-run), `dvc plots diff` against the baseline, and
`dvc exp run -S` on an `eval` param (only baseline_eval and plots re-run)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_whole_dag_on_smoke_profile(tmp_path):
    work = tmp_path / "repo"
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (work / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, work / f)
    shutil.copy(work / "profiles" / "smoke.yaml", work / "params.yaml")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONPATH": str(work),
           "GIT_AUTHOR_NAME": "a5", "GIT_AUTHOR_EMAIL": "a5@localhost", "GIT_COMMITTER_NAME": "a5", "GIT_COMMITTER_EMAIL": "a5@localhost"}
    run = lambda *cmd: subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)  # noqa: E731
    assert run("git", "init", "-q").returncode == 0
    assert run("git", "add", "-A").returncode == 0 and run("git", "commit", "-qm", "smoke").returncode == 0
    ran_stages = lambda r: {line.split("'")[1] for line in r.stdout.splitlines() if line.startswith("Running stage")}  # noqa: E731
    r = run("dvc", "repro", "ei_round_2@G2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert {"ei_round_1@G2", "ei_round_2@G2"} <= ran_stages(r) and "ei_round_3@G2" not in ran_stages(r)
    r = run("dvc", "repro")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ran = ran_stages(r)
    assert "ei_round_3@G2" in ran and "plots" in ran and not ran & {"ei_round_1@G2", "ei_round_2@G2", "sft@filtered"}, ran
    summary = (work / "reports" / "summary.md").read_text()
    assert "GRPO" in summary and "EI" in summary and "SFT" in summary
    base = json.loads((work / "results" / "baseline" / "metrics.json").read_text())
    assert base["n"] == 8 and base["format1_answer1"] + base["format1_answer0"] + base["format0_answer0"] == 8
    r = run("dvc", "status")
    assert "up to date" in r.stdout, r.stdout
    r = run("dvc", "repro", "--dry")
    assert "Running stage" not in r.stdout, r.stdout
    assert run("git", "add", "-A").returncode == 0 and run("git", "commit", "-qm", "results").returncode == 0
    r = run("dvc", "exp", "run", "-S", "grpo.learning_rate=3e-6")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ran = ran_stages(r)
    assert ran == {"grpo@reinforce_baseline", "grpo@no_baseline", "grpo@clip_offpolicy", "plots"}, ran
    rounds = (work / "results" / "ei" / "G2" / "round_5" / "logs" / "rounds.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in rounds[1:]] == ["0", "1", "2", "3", "4", "5"], rounds  # round 0 = the initial policy
    r = run("dvc", "plots", "diff", "HEAD", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    grpo = json.loads(r.stdout)["data"]["GRPO validation accuracy vs step"]
    revs = {v["rev"] for e in grpo for v in e["content"]["data"]["values"]}
    assert revs == {"HEAD", "workspace"}, revs
    # the zero-shot eval's params rerun only the zero-shot eval (and the plots that read its metrics)
    r = run("dvc", "exp", "run", "-S", "eval.n_examples=4")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert ran_stages(r) == {"baseline_eval", "plots"}, ran_stages(r)
