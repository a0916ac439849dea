"""1 process against 2 (torchrun, gloo) under ddp and fsdp2: the same gradients, update, logged metrics, old
log-probs and gathered rollouts, checkpoints across layouts; the launcher, two nodes on one machine
(tests/dist_worker.py runs each side). Tiers: the tests on the worker's four runs (~1.5 min on 2 cores) and the
two-node rendezvous (~10 s) are slow; the launcher's command lines, the refusals and a failing node are fast."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from a5core.model.distributed import DistributedConfig
from a5core.stage.launch import Placement, command, params_path

ROOT = Path(__file__).resolve().parents[1]
WORKER = "tests/dist_worker.py"


def _run(argv: list[str], out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "A5_THREADS": "1"}
    proc = subprocess.run(argv + ["--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    errors = [line for line in proc.stderr.splitlines() if "Error" in line]  # each rank's root cause
    assert proc.returncode == 0, "\n".join(errors[:20]) + proc.stderr[-3000:]
    return torch.load(out, weights_only=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("dist")
    out = {"single": _run([sys.executable, WORKER], tmp / "single.pt")}
    for strategy in ("ddp", "fsdp2"):  # each also resumes from the single process's checkpoint (cross_case)
        script = [WORKER, "--strategy", strategy, "--cross-read", str(tmp / "cross_ddp_1")]
        out[strategy] = _run(command(DistributedConfig(nproc=2, strategy=strategy), script), tmp / f"{strategy}.pt")
    back = [sys.executable, WORKER, "--cross-only", "--cross-read", str(tmp / "cross_fsdp2_2")]
    out["back"] = _run(back, tmp / "back.pt")  # one process resumes from the fsdp2 ranks' checkpoint
    three = [WORKER, "--strategy", "fsdp2", "--cross-only", "--cross-read", str(tmp / "cross_fsdp2_2")]
    out["three"] = _run(command(DistributedConfig(nproc=3, strategy="fsdp2"), three), tmp / "three.pt")  # resharded
    return out


STEP_CASES = [
    *(
        f"grpo/{loss}/{norm}"
        for loss in ("grpo_clip", "grpo_no_clip", "no_baseline", "reinforce_with_baseline")
        for norm in ("masked_mean", "masked_normalize", "token_mean")
    ),  # fmt: skip
    "grpo/gspo/masked_mean",  # the sequence-level ratio: each rank's rows whole, as on one process
    "grpo/one_micro_batch",  # one micro-batch for two ranks: rank 1 contributes zeros (ddp) or a weight-0 repeat
    "grpo/adamw",
    "sft/token_mean",  # 3 micro-batches over 2 ranks
    "sft/per_example",
    "grpo/chunked",  # model.logits_chunk: under fsdp2 the chunked head runs inside the root unit's hooks
    "sft/chunked",
    "grpo/kahan",  # model.weight_update kahan: a5core's KahanAdamW on DTensor shards
]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_ranks_take_the_single_process_optimizer_step(runs, strategy):
    ref, got = runs["single"], runs[strategy]
    assert ref["world"] == 1 and got["world"] == 2
    for case in STEP_CASES:
        r, g = ref[case], got[case]
        scale = float(r["grad"].abs().max())
        assert torch.allclose(g["grad"], r["grad"], rtol=1e-5, atol=1e-5 * scale), case
        if "weights" in r:  # the clipped update (max_grad_norm 1e-3 clips every case: grad_norm > 1e-3)
            assert r["row"]["train/grad_norm"] > 1e-3, case
            # AdamW (lr 1e-3) divides by sqrt(v) + 1e-8: a component with |g| ~ 1e-9 turns a 1e-10 gradient difference
            # (fsdp2 computes without the shared-prefix cache) into ~1e-7 of weight; SGD's update is the gradient
            atol = 1e-6 if case in ("grpo/adamw", "grpo/chunked", "grpo/kahan") else 1e-7
            assert torch.allclose(g["weights"], r["weights"], rtol=0, atol=atol), case
        rows = (r["row"], g["row"])
        for key in rows[0]:
            if not key.startswith("perf/"):  # every logged quantity is global, not rank 0's share
                assert rows[1][key] == pytest.approx(rows[0][key], rel=1e-5, abs=1e-9), (case, key)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_torchao_s_stochastic_rounding_runs_on_shards(runs, strategy):
    """model.weight_update stochastic_round (torchao's AdamW, bf16 weights and gradients) on 2 ranks. ddp: every rank
    updates the whole model with rank 0's random stream, so the weights are the single process's exactly. fsdp2:
    each rank rounds its shard with its own draws, so a weight may land on the other bf16 neighbour; and a gradient
    near 0 can change sign when bf16 partial gradients are summed in another order, which moves AdamW's first step
    by 2 lr (measured: 50 of 120,640 weights). So: within two bf16 steps plus 1% of the update, for 99.9% of them."""
    ref, got = runs["single"]["grpo/stochastic_round"]["weights"].float(), runs[strategy]["grpo/stochastic_round"]
    got, start = got["weights"].float(), runs["single"]["start"].bfloat16().float()
    assert torch.isfinite(got).all() and not torch.equal(got, start)
    if strategy == "ddp":
        assert torch.equal(got, ref)
    step = torch.finfo(torch.bfloat16).eps * torch.maximum(ref.abs(), got.abs())  # one bf16 step at each weight
    close = (got - ref).abs() <= 2 * step + 0.01 * (ref - start).abs()
    assert close.float().mean() >= 0.999, int((~close).sum())


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_old_log_probs_and_rollouts_gathered_on_two_ranks_equal_one_ranks(runs, strategy):
    ref, got = runs["single"], runs[strategy]
    assert all(torch.equal(a, b) for a, b in zip(ref["old_log_probs"], got["old_log_probs"]))
    assert got["rollouts"] == ref["rollouts"]  # ids, sample index, token ids, text, reward: in the same order
    assert len({r[0] for r in ref["rollouts"]}) == 5
    assert got["bf16_rollouts"] == ref["bf16_rollouts"] and len(ref["bf16_rollouts"]) == 6  # the copy of the whole


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["single", "ddp", "fsdp2"])
def test_the_checkpointed_states_resume_the_same_run(runs, strategy):
    """Through the Checkpointer: every rank resumes at the saved step and history. Under fsdp2 each rank wrote its
    own shards (torch's distributed checkpoint: one file per rank) and reads them back, and rank 0 alone reads
    state.pt; elsewhere every rank reads state.pt, which holds the whole weights."""
    resume = runs[strategy]["resume"]
    assert torch.equal(resume["resumed"], resume["straight"])
    assert resume["readers"] == {"single": [0], "ddp": [0, 1], "fsdp2": [0]}[strategy]
    assert resume["shards"] == ([".metadata", "__0_0.distcp", "__1_0.distcp"] if strategy == "fsdp2" else [])
    ranks = 1 if strategy == "single" else 2
    assert resume["restored"] == [(1, [{"step": 1}])] * ranks
    cuts = 2 if strategy == "fsdp2" else 1  # a cut shard file (fsdp2), a cut state.pt: no rank resumes from it
    assert resume["fresh_start"] == [[True] * cuts] * ranks
    assert resume["garbled"] == ([[True, True]] * 2 if strategy == "fsdp2" else [[]] * ranks)
    assert torch.allclose(resume["straight"], runs["single"]["resume"]["straight"], rtol=0, atol=2e-6)  # 2 AdamW
    kahan = runs[strategy]["resume_kahan"]  # KahanAdamW's state (compensation buffer, int step) resumes too
    assert torch.equal(kahan["resumed"], kahan["straight"]) and kahan["restored"] == [(1, [{"step": 1}])] * ranks


@pytest.mark.slow
def test_a_checkpoint_resumes_in_another_layout_and_world_size(runs):
    """Written by one process (optimizer state by index), resumed on 2 ddp or fsdp2 ranks (by name); written by 2
    fsdp2 ranks (a distributed checkpoint), resumed by one process and resharded onto 3 fsdp2 ranks: the second
    step is the two straight steps' (2 AdamW steps, as above)."""
    straight = runs["single"]["resume"]["straight"]
    assert runs["three"]["world"] == 3
    for who in ("ddp", "fsdp2", "back", "three"):
        got = runs[who]["cross"]
        assert got["step"] == 1 and torch.allclose(got["resumed"], straight, rtol=0, atol=2e-6), who


@pytest.mark.slow
def test_a_rank_local_decision_is_taken_by_every_rank(runs):
    """GRPO's wall-clock budget: a rank whose own clock ran out stops every rank at the same step."""
    assert runs["ddp"]["any_rank"] == [True, False] and runs["single"]["any_rank"] == [False, False]


@pytest.mark.slow
def test_a_grader_timeout_on_one_rank_does_not_hold_up_the_other(runs):
    assert runs["ddp"]["timeouts"] == ["custom", "timeout"] and runs["single"]["timeouts"] == ["custom"]


def test_the_launcher_runs_one_process_in_place_and_n_under_torchrun():
    script = ["stages/grpo.py", "--run", "x", "--params", "p.yaml"]
    assert command(DistributedConfig(), script) == [sys.executable, *script]
    node0 = Placement("node0:29400", ("node1",))
    multi = command(DistributedConfig(nproc=4, nnodes=2), script, node0)
    assert multi[1:3] == ["-m", "torch.distributed.run"] and multi[-len(script) :] == script
    assert {"--nnodes=2", "--nproc-per-node=4", "--rdzv-endpoint=node0:29400"} <= set(multi)
    assert params_path(script) == "p.yaml" and params_path(script[:3]) == "params.yaml"
    other = command(DistributedConfig(nproc=4, nnodes=2), [*script[:2], "y"], node0)
    ids = [next(a for a in argv if a.startswith("--rdzv-id=grpo-")) for argv in (multi, other)]
    assert ids[0] != ids[1]  # grpo@x and grpo@y never join each other's rendezvous


PROBE = """import json, os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
rank, node = dist.get_rank(), os.environ.get("A5_LAUNCH_NODE")
row = {"rank": rank, "world": dist.get_world_size(), "sum": t.item(), "node": node}
open(os.path.join(os.environ["OUT"], f"rank{rank}.json"), "w").write(json.dumps(row))
dist.destroy_process_group()
"""
LOCAL_SHELL = "bash -c 'exec bash -c \"$2\"' remote"  # stands in for ssh: runs the line here ($1 is the host)


def _two_nodes(tmp_path, shell: str) -> subprocess.CompletedProcess:
    """`python -m a5core.stage.launch` of a probe script as node 0 of two, node 1 on this machine through `shell`."""
    host = socket.gethostname()  # resolves to this machine; the section refuses a literal localhost for two nodes
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    params = tmp_path / "p.yaml"
    params.write_text("distributed: {nproc: 1, nnodes: 2}\n")
    (tmp_path / "probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "A5_REMOTE_SHELL": shell, "OUT": str(tmp_path)}
    env |= {"A5_RDZV_ENDPOINT": f"{host}:{port}", "A5_HOSTS": host}  # where: the environment, not the params
    argv = [sys.executable, "-m", "a5core.stage.launch", str(tmp_path / "probe.py"), "--params", str(params)]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_node_0_starts_the_other_nodes_and_they_meet_in_one_rendezvous(tmp_path):
    proc = _two_nodes(tmp_path, LOCAL_SHELL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = sorted((json.loads(f.read_text()) for f in tmp_path.glob("rank*.json")), key=lambda r: r["rank"])
    assert [(r["rank"], r["world"], r["sum"]) for r in got] == [(0, 2, 3.0), (1, 2, 3.0)]
    assert sorted(str(r["node"]) for r in got) == sorted(["None", socket.gethostname()])  # node 0, and node 1


def test_a_node_that_fails_stops_the_others(tmp_path):
    proc = _two_nodes(tmp_path, "bash -c 'exit 3' remote")  # node 1 cannot start: node 0 waits in vain otherwise
    assert proc.returncode == 3 and not list(tmp_path.glob("rank*.json"))


def test_the_launch_refuses_a_multi_node_run_without_a_reachable_rendezvous():
    assert Placement().problems(2) and not Placement().problems(1)
    assert Placement("10.0.0.1:0").problems(2)
    assert Placement("nohost").problems(1)
    assert not Placement("10.0.0.1:29400").problems(2)
    assert Placement("10.0.0.1:29400", ("node1",)).problems(3)
    env = {"A5_RDZV_ENDPOINT": "node0:29400", "A5_HOSTS": "node1, node2 node3"}
    assert Placement.from_env(env) == Placement("node0:29400", ("node1", "node2", "node3"))


def test_where_processes_run_is_no_param():
    """Hosts and the rendezvous endpoint key no cache: a params file that still names them is refused with the
    environment variable that replaces each (moving a run to other nodes changes no stage's params)."""
    from a5core.config.sections import ConfigError, from_dict

    for key, env in (("hosts", "A5_HOSTS"), ("rdzv_endpoint", "A5_RDZV_ENDPOINT")):
        with pytest.raises(ConfigError, match=f"no longer a param.*{env}"):
            from_dict(DistributedConfig, {"nproc": 1, key: "x"}, "distributed")


def test_what_n_ranks_cannot_run_is_refused_before_any_work():
    from a5core.checks.inputs import distributed_problems

    base = {"distributed": {"nproc": 2, "nnodes": 1, "strategy": "fsdp2"}, "model": {"weight_update": "nearest"}}
    assert distributed_problems(base) == []
    shards_ok = {"logits_chunk": 1024, "weight_update": "stochastic_round"}  # the chunked head, torchao: STEP_CASES
    assert distributed_problems({**base, "model": shards_ok}) == []
    assert distributed_problems({**base, "model": {"lora_rank": 8}}) == [
        "distributed.strategy fsdp2 runs without model.lora_rank (use ddp)"
    ]
    kl = {**base, "grpo": {"kl_coef": 0.0}, "grpo_runs": {"a": {"kl_coef": 0.1}}}
    assert "distributed.strategy fsdp2 runs without grpo kl_coef (use ddp)" in distributed_problems(kl)
    engines = {**base, "generation": {"backend": "vllm", "layout": "two_gpu"}}
    assert any("one_gpu" in p for p in distributed_problems(engines))
    single = {**engines, "distributed": {"nproc": 1, "nnodes": 1, "strategy": "fsdp2"}, "model": {"lora_rank": 8}}
    assert distributed_problems(single) == []  # one process: today's path, whatever the strategy says


def test_threads_follow_the_cpus_the_process_may_use(monkeypatch):
    """Inside a SLURM or container cgroup the affinity mask, not the machine's core count, sizes torch's threads."""
    import torch

    from a5core.stage import entry

    monkeypatch.delenv("A5_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    before = torch.get_num_threads()
    try:
        entry.setup_torch(0)
        assert entry.usable_cores() == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


TORCHRUN_SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
probe.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-06_13:50:38
  host      : gpu07
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 19701)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 19701
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-06_13:50:38
  host      : gpu08
  rank      : 3 (local_rank: 1)
{exitcode}
============================================================
"""


@pytest.mark.parametrize(
    ("fields", "cause"),
    [
        (
            "  exitcode  : -9 (pid: 19702)  (SIGKILL)\n  error_file: <N/A>\n"
            "  traceback : Signal 9 (SIGKILL) received by PID 19702",
            "killed by SIGKILL",
        ),
        (
            "  exitcode  : 1 (pid: 19725) \n  error_file: /tmp/e/error.json\n  traceback : Traceback (most recent "
            'call last):\n    File "probe.py", line 6, in <module>\n      raise ValueError("boom")\n'
            "  builtins.x.ValueError: boom\n  ",
            "ValueError: boom",
        ),
        (
            "  exitcode  : 1 (pid: 1) \n  error_file: /tmp/e/error.json\n  traceback : Traceback (most recent call "
            "last):\n  a5core.stage.entry.StageFailed: error: grpo: lr 0 (fix it)",
            "error: grpo: lr 0 (fix it)",
        ),
        (  # the rank recorded its error, then its process group's teardown aborted it: the error is the cause
            "  exitcode  : -6 (pid: 1) \n  error_file: /tmp/e/error.json\n  traceback : Traceback (most recent call "
            "last):\n  a5core.stage.entry.StageFailed: error: grpo: lr 0 (fix it)",
            "error: grpo: lr 0 (fix it)",
        ),
        (  # a CUDA error: notes below the exception line; a frame's code line that looks like a field
            "  exitcode  : 1 (pid: 1) \n  error_file: /tmp/e/error.json\n  traceback : Traceback (most recent "
            'call last):\n    File "grpo.py", line 3, in step\n      rank: int = 3\n'
            "  torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
            "  Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n  ",
            "AcceleratorError: CUDA error: an illegal memory access was encountered",
        ),
        (
            "  exitcode  : 5 (pid: 1) \n  error_file: <N/A>\n"
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
            "exit code 5",
        ),
    ],
)
def test_the_failure_summary_gives_the_root_cause_s_host_rank_and_cause(fields, cause):
    from a5core.stage.launch import RootCause

    summary = RootCause()
    for line in TORCHRUN_SUMMARY.replace("{exitcode}", fields).splitlines(keepends=True):
        summary.feed(line)
    assert summary.found == ("gpu08", "3", cause)  # the root cause's block, not the SIGTERMed rank's before it


FAILING = """import os, signal, sys, time
import torch.distributed as dist
from a5core.stage import entry

def main():
    dist.init_process_group("gloo")
    dist.barrier()  # mid-stage: both ranks past the rendezvous
    if dist.get_rank() == 1:
        if sys.argv[1] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError("boom: rank 1's own error")
    time.sleep(120)  # the other rank is busy: torchrun must stop it

entry.run(main)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("how", "cause"), [("kill", "killed by SIGKILL"), ("raise", "ValueError: boom: rank 1's own")])
def test_a_failed_rank_ends_the_stage_in_one_line_naming_its_rank_and_cause(tmp_path, how, cause):
    params = tmp_path / "p.yaml"
    params.write_text("distributed: {nproc: 2, nnodes: 1}\n")
    (tmp_path / "failing.py").write_text(FAILING)
    argv = [sys.executable, "-m", "a5core.stage.launch", str(tmp_path / "failing.py"), how, "--params", str(params)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode != 0 and time.monotonic() - t0 < 100  # the busy rank was stopped
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: failing.py failed on ") and f", rank 1: {cause}" in last, last
    assert last.endswith("torchrun stopped the other ranks")
    assert "Traceback" in done.stderr  # the tracebacks stay, above the line


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_from_outside_ends_with_its_code_and_no_failure_line(tmp_path, sig, code):
    """Ctrl-C (SIGINT to the launcher's group, as a terminal sends it) and scancel or a time limit (SIGTERM to the
    launcher, which passes it on to torchrun)."""
    params = tmp_path / "p.yaml"
    params.write_text("distributed: {nproc: 2, nnodes: 1}\n")
    (tmp_path / "busy.py").write_text(
        "import time, torch.distributed as dist\ndist.init_process_group('gloo')\n"
        "open('ready', 'a').close()\ntime.sleep(120)\n"
    )
    argv = [sys.executable, "-m", "a5core.stage.launch", str(tmp_path / "busy.py"), "--params", str(params)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C sends: the launcher's group, torchrun in it
    else:
        proc.send_signal(sig)  # the launcher alone
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    assert "failed" not in (err.strip().splitlines() or [""])[-1]


def test_an_error_file_that_cannot_be_written_does_not_replace_the_error(monkeypatch, tmp_path):
    from a5core.stage import entry

    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "missing" / "error.json"))  # as on a full disk
    entry._record_for_torchrun(ValueError("boom"))  # no OSError out of it
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "error.json"))
    try:
        raise ValueError("boom")
    except ValueError as err:
        entry._record_for_torchrun(err)
    assert json.loads((tmp_path / "error.json").read_text())["message"]["message"] == "ValueError: boom"
