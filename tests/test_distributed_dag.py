"""The smoke DAG on 2 processes (torchrun over gloo, launched by dvc.yaml's commands), shared by three clones through
a folder remote (docs/scaling-out.md, "A grid over machines"): two machines each run one GRPO run and push what they
ran; a collector's `dvc repro --pull` of the whole DAG runs neither of them nor anything upstream, restores their
outputs byte for byte and runs the rest on 2 ranks, rank 0 alone writing. SFT on 2 ranks (ddp), on 1 and under fsdp2
give the same weights to float tolerance; a 2-rank SFT stage killed with SIGKILL resumes to the uninterrupted run's
bytes on 2 ranks and to its weights on another rank count (ddp on 1, fsdp2 resharded onto 3), and a 2-rank GRPO stage
to its bytes on 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import yaml

from a5core.run.history import read_log
from tests.support.repos import ok, ran_stages, repo_env, scratch_repo, tree_digest
from tests.support.resume import kill_repo, sft_cmd, stage_runs, straight_killed_resumed, weights_close

GRID = ("no_baseline", "reinforce_baseline")  # one GRPO run per machine
pytestmark = pytest.mark.dag  # each test also `slow`
UPSTREAM = {"check_params", "fetch_model", "prepare_math", "baseline_eval", "filter_sft_data", "sft@filtered"}


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> dict:
    """The smoke repo with `distributed.nproc=2` and a folder remote, cloned to two machines that each run one GRPO
    run with `dvc repro --pull` and push what they ran (`tools.push_runs`), then to a collector that runs
    `dvc repro --pull` of the whole DAG. Returns {name: (path, runner, the stages its repro ran, its stdout)}."""
    tmp = tmp_path_factory.mktemp("grid")
    origin, run = scratch_repo(tmp, "smoke")
    ok(run(sys.executable, "-m", "tools.profile", "smoke", "distributed.nproc=2"))
    ok(run("dvc", "remote", "add", "-d", "shared", str(tmp / "remote")))
    ok(run("git", "add", "-A"))
    ok(run("git", "commit", "-qm", "two ranks, a shared remote"))
    machines = {}
    for name, targets in [*((x, [f"grpo@{x}"]) for x in GRID), ("collector", [])]:
        path = tmp / name
        ok(run("git", "clone", "-q", str(origin), str(path)))
        at = partial(_at, path, repo_env(path))
        r = at("dvc", "repro", "--pull", *targets)  # with the run cache the machines before it pushed
        ok(r)
        if targets:
            ok(at(sys.executable, "-m", "tools.push_runs"))
        machines[name] = (path, at, ran_stages(r), r.stdout)
    return machines


def _at(path: Path, env: dict, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=path, env=env, capture_output=True, text=True)


def _grpo_outputs(repo: Path, run: str) -> dict[str, str]:
    model = {f"model/{k}": v for k, v in tree_digest(repo / "models" / f"grpo_{run}").items()}
    return model | {f"results/{k}": v for k, v in tree_digest(repo / "results" / "grpo" / run).items()}


@pytest.mark.slow
def test_two_machines_split_the_grid_and_a_collector_runs_only_the_rest_on_two_ranks(grid):
    assert [grid[x][2] for x in GRID] == [UPSTREAM | {f"grpo@{GRID[0]}"}, {f"grpo@{GRID[1]}"}]  # upstream: cached
    collector, at, ran, stdout = grid["collector"]
    assert not ran & (UPSTREAM | {f"grpo@{x}" for x in GRID}), ran
    assert {"sft@full", "ei_round_5@G2", "grpo@clip_offpolicy", "plots"} <= ran, ran  # the whole DAG, on 2 ranks
    for name in GRID:  # restored from the machine that ran it, byte for byte
        assert _grpo_outputs(collector, name) == _grpo_outputs(grid[name][0], name), name
    assert "up to date" in at("dvc", "status").stdout
    elsewhere = {**repo_env(collector), "A5_RDZV_ENDPOINT": "gpu07:29400", "A5_HOSTS": "gpu08"}  # other nodes
    assert "up to date" in _at(collector, elsewhere, "dvc", "status").stdout  # where is no cache key
    assert all(x in (collector / "reports" / "summary.md").read_text() for x in GRID)
    assert stdout.count("sft@full: ") == 1 and stdout.count("grpo@clip_offpolicy: validation") == 1  # rank 0 prints
    train = (collector / "results" / "sft" / "full" / "logs" / "train.csv").read_text().splitlines()
    steps = [line.split(",")[0] for line in train[1:]]
    assert steps == [str(s) for s in range(1, len(steps) + 1)], steps  # one writer: no step logged twice
    assert not (collector / "scratch").exists()


@pytest.mark.slow
def test_a_two_rank_sft_stage_equals_one_process_and_fsdp2(grid):
    work, at, _, _ = grid[GRID[0]]  # sft@filtered ran there on 2 ranks (ddp)
    two = work.parent / "two_ranks"
    shutil.copytree(work / "models" / "sft_filtered", two)
    metrics = (work / "results" / "sft" / "filtered" / "metrics.json").read_text()
    for overrides in (["distributed.nproc=1"], ["distributed.nproc=2", "distributed.strategy=fsdp2"]):
        ok(at(sys.executable, "-m", "tools.profile", "smoke", *overrides))
        r = at("dvc", "repro", "--single-item", "sft@filtered")
        ok(r)
        assert ran_stages(r) == {"sft@filtered"}, ran_stages(r)
        weights_close(work / "models" / "sft_filtered", two)
        assert (work / "results" / "sft" / "filtered" / "metrics.json").read_text() == metrics, overrides


def _launch(cmd: list[str]) -> list[str]:
    return [sys.executable, "-m", "a5core.stage.launch", *cmd[1:]]  # cmd[0] is python: the launcher runs the script


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_a_killed_two_rank_stage_resumes_on_two_ranks_and_on_another_count(tmp_path, strategy):
    """ddp's checkpoint holds whole tensors and resumes on 1 process; fsdp2's is torch's distributed checkpoint (a
    shard file per rank, no whole copy) and resumes resharded onto 3 ranks."""
    work, params, env = kill_repo(tmp_path, nproc=2)
    params["distributed"]["strategy"] = strategy
    (work / "kill.yaml").write_text(yaml.safe_dump(params))
    run = stage_runs(lambda name: _launch(sft_cmd(name)), work, env)
    assert 0 < straight_killed_resumed(run, 5).killed_at < 24
    assert tree_digest(work / "models" / "resumed") == tree_digest(work / "models" / "straight")  # byte for byte
    assert tree_digest(work / "results" / "resumed") == tree_digest(work / "results" / "straight")
    killed_at = run("other_n", 5)  # killed on 2 ranks
    assert 0 < killed_at < 24
    shards = sorted(p.name for p in (work / "scratch" / "other_n" / "state" / "dcp").glob("*.distcp"))
    assert shards == (["__0_0.distcp", "__1_0.distcp"] if strategy == "fsdp2" else [])
    timing = work / "run_records" / "other_n" / "timing_train.csv"  # the steps' wall-clock seconds
    before = timing.read_text().splitlines()[: 1 + killed_at]
    nproc = {"ddp": 1, "fsdp2": 3}[strategy]
    other = {**params, "distributed": {**params["distributed"], "nproc": nproc}}
    (work / "other.yaml").write_text(yaml.safe_dump(other))
    ok(subprocess.run(_launch(sft_cmd("other_n", "other.yaml")), cwd=work, env=env, capture_output=True, text=True))
    assert timing.read_text().splitlines()[: 1 + killed_at] == before  # resumed: a fresh start measures anew
    weights_close(work / "models" / "other_n", work / "models" / "straight", atol=1e-5)  # the 2-rank checkpoint


def _grpo_cmd(out: str) -> list[str]:
    """grpo@reinforce_baseline from the base model under kill.yaml, its outputs under `out`."""
    paths = {"--out": f"models/{out}", "--metrics": f"results/{out}/metrics.json", "--live": f"results/{out}/live"}
    paths |= {"--logs": f"results/{out}/logs", "--scratch": f"scratch/{out}"}
    paths |= {"--record": f"run_records/{out}"}
    data = {"--train": "data/prepared/train.parquet", "--validation": "data/prepared/validation.parquet"}
    flags = {"--run": "reinforce_baseline", "--model": "models/base", **data, **paths, "--params": "kill.yaml"}
    return [sys.executable, "-m", "a5core.stage.launch", "stages/grpo.py", *(x for kv in flags.items() for x in kv)]


@pytest.mark.slow
@pytest.mark.parametrize("staleness", [0, 1])
def test_a_killed_two_rank_grpo_stage_resumes_byte_for_byte(tmp_path, staleness):
    """GRPO's checkpoint (weights, AdamW, history, the step; with grpo.max_staleness 1 the rollouts in flight)
    written by 2 ranks and resumed by 2 (the initial validation's no-grad forwards come before the optimizer is made):
    the same model folder and results as the uninterrupted run, byte for byte. With staleness 1 one process trains
    to the same weights (float tolerance), each rank having generated its block in its rollout thread."""
    work, params, env = kill_repo(tmp_path, nproc=2)
    # an entropy bonus gives every step a gradient (weights that move), a step whose groups all score alike too
    params["grpo"].update(n_grpo_steps=6, eval_every=0, checkpoint_every=1, entropy_coef=0.05)
    if staleness:
        params["grpo"].update(max_staleness=1, tis_cap=2.0)
    (work / "kill.yaml").write_text(yaml.safe_dump(params))
    timing = work / "run_records" / "resumed" / "timing_train.csv"  # wall-clock seconds of each step
    before = []  # the killed process's timings of the steps up to its checkpoint

    stage = stage_runs(_grpo_cmd, work, env)

    def run(name: str, kill_at: int | None) -> int | None:
        killed_at = stage(name, kill_at)
        if killed_at is not None:
            before.extend(timing.read_text().splitlines()[: 1 + killed_at])
        return killed_at

    killed_at = straight_killed_resumed(run, 2).killed_at
    assert 0 < killed_at < 6  # mid-run: after step 2 or later
    # it resumed: the steps before the checkpoint keep the killed process's timings (a fresh start measures anew)
    assert timing.read_text().splitlines()[: 1 + killed_at] == before
    assert all(float(r["train/grad_norm"]) > 0 for r in read_log(work / "results" / "straight" / "logs" / "train.csv"))
    assert tree_digest(work / "models" / "resumed") == tree_digest(work / "models" / "straight")
    assert tree_digest(work / "results" / "resumed") == tree_digest(work / "results" / "straight")
    rows = read_log(work / "results" / "straight" / "logs" / "train.csv")
    assert [int(float(r.get("rollout/staleness") or 0)) for r in rows] == [0] + [staleness] * 5
    if staleness:
        one = {**params, "distributed": {**params["distributed"], "nproc": 1}}
        (work / "kill.yaml").write_text(yaml.safe_dump(one))
        ok(subprocess.run(_grpo_cmd("one"), cwd=work, env=env, capture_output=True, text=True))
        weights_close(work / "models" / "one", work / "models" / "straight", atol=1e-5)
