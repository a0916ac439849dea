"""The pre-flight refuses a GPU profile where it cannot run, before any model is fetched: the checks on given facts,
the facts of this (CPU) machine, and the first stage of the full profile stopping with the reason."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from a5core.run import preflight
from a5core.run.preflight import Gpu, Machine
from tests.support.profiles import composed

ROOT = Path(__file__).resolve().parents[1]
FULL = yaml.safe_load((ROOT / "tests" / "fixtures" / "profiles" / "full.yaml").read_text())
HOPPER = Gpu(79.2, (9, 0))  # an 80 GB card (79.2 GiB visible)
H100 = Machine(True, 2, "2.14.0+cu130", "13.0", "580.95.05", (HOPPER, HOPPER))


def _params(**edits) -> dict:
    params = {section: dict(values) if isinstance(values, dict) else values for section, values in FULL.items()}
    for key, value in edits.items():
        section, field = key.split("__")
        params[section][field] = value
    return params


def _write(tmp_path, params: dict) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def test_a_gpu_profile_is_refused_without_cuda_and_says_why():
    cpu_build = Machine(False, 0, "2.13.0+cpu", None, None)
    [found] = preflight.problems(_params(), cpu_build)
    assert "model.device is cuda" in found and "vllm backend" in found and "bfloat16" in found
    assert "torch 2.13.0+cpu is a CPU build" in found and "no NVIDIA driver: nvidia-smi" in found
    assert "requirements/gpu.lock" in found and "580.65" in found and "full-mini" in found
    old_driver = Machine(False, 0, "2.14.0+cu130", "13.0", "535.104.05")
    [found] = preflight.problems(_params(), old_driver)
    assert "NVIDIA driver 535.104.05 is older than CUDA 13.0's minimum 580.65" in found and "CPU build" not in found
    hidden = Machine(False, 0, "2.14.0+cu130", "13.0", "580.95.05")
    [found] = preflight.problems(_params(), hidden)
    assert "torch.cuda.is_available() is False with driver 580.95.05" in found and "CUDA_VISIBLE_DEVICES" in found


def test_cpu_profiles_and_a_working_machine_pass():
    cpu_build = Machine(False, 0, "2.13.0+cpu", None, None)
    for profile in ("default", "smoke", "full-mini", "cpu-study"):
        assert preflight.problems(composed(profile), cpu_build) == [], profile
    assert preflight.problems(_params(), H100) == []


def test_two_gpu_needs_two_gpus_and_bf16_needs_ampere():
    one = Machine(True, 1, "2.14.0+cu130", "13.0", "580.95.05", (HOPPER,))
    [found] = preflight.problems(_params(), one)
    assert "two_gpu needs two visible GPUs, 1 found" in found and "generation.layout=one_gpu" in found
    assert preflight.problems(_params(generation__layout="one_gpu"), one) == []
    turing = Machine(True, 2, "2.14.0+cu130", "13.0", "580.95.05", (Gpu(15.0, (7, 5)),) * 2)
    [found] = preflight.problems(_params(), turing)
    assert "bfloat16 needs compute capability 8.0" in found and "GPU 0 has 7.5, GPU 1 has 7.5" in found
    assert preflight.problems(_params(model__dtype="float32"), turing) == []
    # two_gpu's engine card is checked too; one_gpu uses only the first
    mixed = Machine(True, 2, "2.14.0+cu130", "13.0", "580.95.05", (HOPPER, Gpu(15.0, (7, 5))))
    [found] = preflight.problems(_params(), mixed)
    assert "GPU 1 has 7.5" in found and "GPU 0" not in found
    assert preflight.problems(_params(generation__layout="one_gpu"), mixed) == []
    ranks = _params(generation__layout="one_gpu", distributed__nproc=2)  # each rank on its own GPU
    assert "GPU 1 has 7.5" in preflight.problems(ranks, mixed)[0]


def test_one_gpu_utilization_must_leave_room_for_the_policy_and_the_cuda_context(tmp_path):
    # 0.87 of a 79.2 GiB card (68.9) + bf16 weights and moments (8.6) = 77.5 GB fitted; the plan now adds the CUDA
    # context and the allocator's measured slack (3.2): 80.7, refused (0.85 plans 79.1 of 79.2)
    greedy = _write(tmp_path, _params(generation__layout="one_gpu", generation__gpu_memory_utilization=0.87))
    [found] = preflight.plan_problems(str(greedy), H100, str(tmp_path / "no-model"))
    assert "the memory plan does not fit this GPU" in found and "CUDA context, allocator slack" in found
    modest = _write(tmp_path, _params(generation__layout="one_gpu", generation__gpu_memory_utilization=0.3))
    assert preflight.plan_problems(str(modest), H100, str(tmp_path / "no-model")) == []
    cpu = Machine(False, 0, "2.13.0+cpu", None, None)
    assert preflight.plan_problems(str(greedy), cpu, str(tmp_path / "no-model")) == []  # refused earlier instead


def test_this_machines_facts_and_nvidia_smi_parsing(tmp_path, monkeypatch):
    import torch

    facts = preflight.machine()
    assert facts.cuda_available == torch.cuda.is_available() and facts.torch_cuda == torch.version.cuda
    # nvidia-smi cannot run here: a script on PATH stands in for its CSV answer to check the parsing
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU-aa11, 580.95.05, 81559, 9.0'\necho 'GPU-bb22, 580.95.05, 40960, 8.0'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    facts = preflight.machine()
    assert facts.driver == "580.95.05" and [g.capability for g in facts.gpus] == [(8, 0), (9, 0)]
    assert abs(facts.gpus[0].gb - 40.0) < 0.01 and abs(facts.gpus[1].gb - 79.65) < 0.01
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # so CUDA's cuda:0 is nvidia-smi's GPU 1 here
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aa,7,0")  # a UUID prefix; CUDA stops at an index with no GPU
    assert [g.capability for g in preflight.machine().gpus] == [(9, 0)]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert len(preflight.machine().gpus) == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234")  # a slice: counted, its facts unknown (checks skipped)
    assert preflight.machine().gpus == (Gpu(None, None),)


def test_the_plan_is_made_on_the_smallest_card_the_layout_uses(tmp_path):
    small = Machine(True, 2, "2.14.0+cu130", "13.0", "580.95.05", (HOPPER, Gpu(15.0, (9, 0))))
    two = _write(tmp_path, _params())
    [found] = preflight.plan_problems(str(two), small, str(tmp_path / "no-model"))
    assert "the memory plan does not fit this GPU" in found and "15 GB" in found
    one = _write(tmp_path, _params(generation__layout="one_gpu", generation__gpu_memory_utilization=0.3))
    assert preflight.plan_problems(str(one), small, str(tmp_path / "no-model")) == []


def test_the_full_profiles_first_stage_stops_before_downloading(tmp_path):
    """`python -m tools.profile full && dvc repro` on this CPU machine: fetch_model exits naming the missing CUDA."""
    params = _write(tmp_path, FULL)
    out = tmp_path / "models" / "base"
    cmd = [sys.executable, str(ROOT / "stages" / "fetch_model.py"), "--out", str(out), "--params", str(params)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
    r = subprocess.run(
        [*cmd, "--record", str(tmp_path / "r.json")], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error: model.device is cuda") and "CUDA is unusable here" in r.stderr
    assert "Nothing was run." in r.stderr
    assert not out.exists() and not (tmp_path / "hf").exists() and not (tmp_path / "r.json").exists()


def test_dvc_repro_of_the_full_profile_in_a_fresh_clone_stops_at_the_first_stage_naming_cuda(tmp_path):
    """The README's `python -m tools.profile full && dvc repro` in a clone with no MATH data and no model: the first
    stage (check_params) names the missing CUDA, not the missing data, and nothing is fetched."""
    if preflight.machine().cuda_available:
        pytest.skip("this machine has CUDA: the refusal is covered by the fact-driven checks above")
    from tests.support.repos import ran_stages, scratch_repo

    work, run = scratch_repo(tmp_path, "full")
    r = run("dvc", "repro")
    assert r.returncode != 0 and ran_stages(r) == {"check_params"}, r.stdout[-2000:]
    err = r.stdout + r.stderr
    assert "error: model.device is cuda" in err and "CUDA is unusable here" in err and "Traceback" not in err
    assert "does not exist" not in err  # the data files are not what this machine lacks first
    assert not (work / "models" / "base").exists()


def test_a_rank_per_gpu_so_nproc_cannot_exceed_the_visible_gpus():
    """Issue 58: nproc 8 on a node with 2 visible GPUs is refused before anything runs (each rank takes
    cuda:<local rank>), naming both numbers; nproc 2 there passes."""
    one_gpu = {"generation__layout": "one_gpu"}
    [found] = preflight.problems(_params(distributed__nproc=8, **one_gpu), H100)
    assert "distributed.nproc 8 needs one visible GPU per rank of a node, 2 found" in found
    assert "-S distributed.nproc=2" in found
    assert preflight.problems(_params(distributed__nproc=2, **one_gpu), H100) == []
