"""`model.autocast`: the pure resolution table, the mode in force recorded, and the bf16 path itself, forced on this
machine whatever its CPU, so that CI on an AVX2 machine runs what AMX/AVX512-BF16 machines run by default.

Tolerances of the bf16 tests: bf16 keeps 8 significant bits (relative rounding 2^-9 per value), so every matmul's
inputs carry ~0.2% error. Log-probs are differences of logits of size ~10 on the sharpened test model: errors of a
few 1e-2 are bf16's own; a wrong shared prefix or a lost micro-batch moves them by whole nats.
"""

import copy

import pytest
import torch

from a5core.base import run_record
from a5core.config.prompts import build_prompt
from a5core.config.sections import GenerationConfig, ModelConfig, SamplingConfig
from a5core.generation import HFBackend
from a5core.generation.hf import own_copy
from a5core.model import autocast
from a5core.model.autocast import autocast_context, resolve, resolve_generation
from a5core.model.compute import Compute
from a5core.model.logprobs import get_response_log_probs
from a5core.model.tokenization import pad_token_id, tokenize_prompt_and_output
from a5core.rl.sft import SFTConfig, encode_examples, sft_step
from tests.support.loops import SFT_ROWS, flat_grads

BF16_EPS = 2.0**-8  # bf16's machine epsilon (8 significant bits)


@pytest.mark.parametrize(
    "mode, device, flags, on",
    [
        ("off", "cuda", {"amx_bf16"}, False),
        ("bf16", "cpu", {"avx2"}, True),
        ("auto", "cuda", set(), True),
        ("auto", "cpu", {"avx2", "avx512f"}, False),
        ("auto", "cpu", {"avx512f", "avx512_bf16"}, True),
        ("auto", "cpu", {"amx_bf16"}, True),
    ],
)
def test_resolution_table(mode, device, flags, on):
    got, why = resolve(mode, device, flags)
    assert got is on and why


@pytest.mark.parametrize(
    "dtype, device, weights, on",
    [
        ("float32", "cuda", "float32", False),
        ("bfloat16", "cpu", "float32", True),
        ("auto", "cuda", "float32", True),
        ("auto", "cpu", "float32", False),  # also with avx512_bf16: measured, GRPO lost its gain
        ("bfloat16", "cpu", "bfloat16", False),  # bf16 weights: no copy to make
    ],
)
def test_generation_resolution_table(dtype, device, weights, on):
    """generation.dtype for the hf backend: auto is bf16 on CUDA and float32 on CPUs, whatever model.autocast says."""
    got, why = resolve_generation(dtype, device, weights)
    assert got is on and why


def test_mode_in_force_is_printed_and_goes_to_the_run_record(capsys, tmp_path):
    """What a stage does: resolve the mode once (printed), pass it on, and write it into its run record."""
    import dataclasses

    compute = Compute.of(ModelConfig(autocast="bf16"), "cpu")
    record = dataclasses.asdict(compute.autocast)
    assert record == {
        "mode": "bf16",
        "device": "cpu",
        "bf16_autocast": True,
        "decided_by": "model.autocast: bf16",
        "on_float32": True,
        "generation_bf16": False,
        "generation_decided_by": "generation.dtype: float32",
    }
    assert "autocast: bf16 on" in capsys.readouterr().out
    gen = Compute.of(ModelConfig(autocast="off"), "cpu", generation=GenerationConfig(dtype="bfloat16"))
    assert gen.generation_bf16 and not gen.autocast_on  # generation's precision is its own setting
    assert "generation: from a bf16 copy of the float32 weights (generation.dtype: bfloat16)" in capsys.readouterr().out
    vllm = Compute.of(ModelConfig(), "cpu", generation=GenerationConfig(backend="vllm", dtype="bfloat16"), quiet=True)
    assert not vllm.generation_bf16  # an engine holds its own weights in its own dtype
    written = run_record.read_run_record(
        run_record.write_run_record(tmp_path / "r.json", "x", autocast=record, step_s=1.5)
    )
    assert written["autocast"] == record and written["step_s"] == 1.5 and written["machine"]["cpu"]
    assert set(written["machine"]["isa"]) <= set(run_record.ISA_FLAGS)
    with autocast_context(torch.nn.Linear(2, 2), compute.bf16_autocast):
        assert torch.is_autocast_enabled("cpu")
    with autocast_context(torch.nn.Linear(2, 2), Compute().bf16_autocast):  # library use: float32
        assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("fast", [False, True])
def test_auto_follows_the_cpu_for_float32_weights_only(monkeypatch, fast):
    monkeypatch.setattr(autocast, "cpu_flags", lambda: frozenset({"avx512_bf16"} if fast else {"avx2"}))
    on = autocast.resolved("auto", "cpu", quiet=True).bf16_autocast
    with autocast_context(torch.nn.Linear(2, 2), on):
        assert torch.is_autocast_enabled("cpu") is fast
    mixed = torch.nn.Sequential(torch.nn.Linear(2, 2).to(torch.bfloat16), torch.nn.LayerNorm(2))  # fp32 norm kept
    with autocast_context(mixed, on):
        assert torch.is_autocast_enabled("cpu") is fast
    with autocast_context(torch.nn.Linear(2, 2).to(torch.bfloat16), on):
        assert not torch.is_autocast_enabled("cpu")  # bf16 weights: every matmul is bf16 already


def _prompts():
    return [build_prompt("Compute 1+2."), build_prompt("Solve 3x = 9 now please"), build_prompt("7*8")]


def test_bf16_shared_prefix_generation_scores_like_plain_forward(sharp):
    """Forced bf16: the shared-prefix sampling loop's per-token entropies equal a plain forward pass of the bf16 weights
    over the same ids within bf16's error (the float32 test compares sampled ids, which bf16 rounding may flip)."""
    model, tok = sharp
    backend = HFBackend(model, tok, batch_size=8, bf16=True)
    out = backend.generate(
        _prompts(), SamplingConfig(temperature=0.0, max_tokens=12, min_tokens=12, stop=[]), progress=False
    )
    assert next(backend.model.parameters()).dtype == torch.bfloat16  # it generated from the bf16 copy
    bf16 = own_copy(model, bf16=True)
    for p, o in zip(_prompts(), out):
        prompt_ids = tok(p, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt_ids + list(o[0].token_ids)])
        with torch.no_grad():
            logits = bf16(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()  # (12, V)
        plain = torch.distributions.Categorical(logits=logits).entropy()  # (12,)
        assert torch.allclose(torch.tensor(o[0].token_entropies), plain, atol=0.05, rtol=8 * BF16_EPS)
        # greedy under bf16: every sampled id is the argmax of the plain pass or within bf16's error of it
        top = logits.max(-1).values  # (12,)
        chosen = logits.gather(-1, torch.tensor(o[0].token_ids)[:, None])[:, 0]  # (12,)
        assert torch.all(top - chosen <= 0.05 + 8 * BF16_EPS * top.abs())


def test_bf16_generation_runs_on_a_bf16_copy_synced_from_the_float32_policy(sharp):
    """generation.dtype bfloat16 on float32 weights: the backend generates exactly what the policy's weights cast to
    bf16 generate, leaves the policy float32, and a sync after a weight change copies the new weights, also when it
    keeps its own weights for asynchronous rollouts (unwired: without the cast its log-probs are float32's; without
    the copy at a sync, the old weights')."""
    model = copy.deepcopy(sharp[0])
    tok = sharp[1]
    sampling = SamplingConfig(temperature=1.0, max_tokens=10, min_tokens=10, stop=[], n=2, seed=3)

    def run(backend):
        out = backend.generate(_prompts(), sampling, progress=False)
        return [c.token_ids for cs in out for c in cs], torch.tensor(
            [lp for cs in out for c in cs for lp in c.token_logprobs]
        )

    ids, lps = run(HFBackend(model, tok, batch_size=8, bf16=True))
    ref_ids, ref_lps = run(HFBackend(own_copy(model, bf16=True), tok, batch_size=8))
    f32_ids, f32_lps = run(HFBackend(model, tok, batch_size=8))
    assert ids == ref_ids and torch.equal(lps, ref_lps)
    assert ids != f32_ids or (lps - f32_lps).abs().max() > 1e-4  # the bf16 copy really ran
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert HFBackend(model, tok, batch_size=8).model is model  # float32: the policy object itself
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(1.25)  # a weight update
    backend = HFBackend(copy.deepcopy(sharp[0]), tok, batch_size=8, bf16=True)
    backend.sync_weights(model)
    moved_ids, moved_lps = run(backend)
    new_ids, new_lps = run(HFBackend(own_copy(model, bf16=True), tok, batch_size=8))
    assert moved_ids == new_ids and torch.equal(moved_lps, new_lps)
    assert moved_ids != ids or not torch.equal(moved_lps, lps)  # the update changed what is generated
    backend.keep_own_weights()  # asynchronous rollouts: the learner updates the policy while the copy generates
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(0.8)
    stale_ids, stale_lps = run(backend)
    assert stale_ids == moved_ids and torch.equal(stale_lps, moved_lps)  # not synced yet: the last sync's weights
    backend.sync_weights(model)
    synced_ids, synced_lps = run(backend)
    fresh_ids, fresh_lps = run(HFBackend(own_copy(model, bf16=True), tok, batch_size=8))
    assert synced_ids == fresh_ids and torch.equal(synced_lps, fresh_lps)


def test_bf16_shared_prefix_log_probs_match(tiny):
    """Forced bf16: the shared-prefix forward gives the plain forward's log-probs within bf16's own error (measured
    here against float32: 1.5e-3 when written; the two bf16 paths agreed exactly)."""
    model, tok = copy.deepcopy(tiny[0]), tiny[1]
    b = tokenize_prompt_and_output(_prompts()[:2], [" 3 </think> <answer>3</answer>", " x=3"], tok)
    with autocast_context(model, True):
        a = get_response_log_probs(model, b["input_ids"], b["labels"], True)
        s = get_response_log_probs(model, b["input_ids"], b["labels"], True, share_prefix=True)
    with torch.no_grad():
        fp32 = get_response_log_probs(model, b["input_ids"], b["labels"], True)["log_probs"]  # outside: float32
    mask = b["response_mask"].bool()
    bf16_error = (a["log_probs"] - fp32)[mask].abs().max().detach()
    assert 0 < bf16_error < 0.5  # the bf16 path really ran (float32 would give 0), and it is bf16-sized
    assert (a["log_probs"] - s["log_probs"])[mask].abs().max() <= 2 * bf16_error + 1e-3


def test_bf16_grad_accumulation_equals_one_big_batch(tiny):
    """Forced bf16: micro-batch 1 vs 4 over the same 4 examples give the same gradient within bf16's error (the
    float32 test asks 1e-4; bf16 sums rounded products, so the bound is relative to the gradient's norm)."""
    model, tok = tiny
    ex = encode_examples(tok, SFT_ROWS[:4])
    bf16 = Compute(autocast=autocast.resolved("bf16", quiet=True))
    a, b, ref = copy.deepcopy(model), copy.deepcopy(model), copy.deepcopy(model)
    sft_step(a, ex, SFTConfig(micro_batch_size=1), pad_token_id(tok), torch.device("cpu"), bf16)
    sft_step(b, ex, SFTConfig(micro_batch_size=4), pad_token_id(tok), torch.device("cpu"), bf16)
    sft_step(ref, ex, SFTConfig(micro_batch_size=4), pad_token_id(tok), torch.device("cpu"), compute=Compute())
    ga, gb, g32 = flat_grads(a), flat_grads(b), flat_grads(ref)
    assert (ga - gb).norm() <= 16 * BF16_EPS * g32.norm()
    assert 0 < (gb - g32).norm() <= 16 * BF16_EPS * g32.norm()  # bf16 really ran, and only rounding differs


def test_summary_names_the_machine_kind_autocast_and_commits(tmp_path):
    import dataclasses

    from a5core.report.summary import made_on_text

    off = {"autocast": dataclasses.asdict(autocast.resolved("off", quiet=True))}
    records = [run_record.run_record("a", **off), {**run_record.run_record("b", **off), "code_revision": "abc+dirty"}]
    line = made_on_text(records)[0]
    assert run_record.cpu_model() in line and "model.autocast: off (bf16 off)" in line and "abc+dirty" in line
    assert "2 stage runs" in line and made_on_text([]) == [] and "generation in float32." in line
    bf16 = {"autocast": dataclasses.asdict(autocast.resolved("off", generation="bfloat16", quiet=True))}
    line = made_on_text([*records, run_record.run_record("c", **bf16)])[0]
    assert "generation in bf16 (a copy of the weights), float32." in line
    old = {k: v for k, v in dataclasses.asdict(autocast.resolved("bf16", quiet=True)).items() if "generation" not in k}
    assert "generation in bf16 autocast." in made_on_text([run_record.run_record("d", autocast=old)])[0]  # older record


def test_the_grpo_update_and_old_log_probs_follow_the_stage_autocast(tiny):
    """Through the real GRPO functions: the stage's `Compute.autocast` reaches the old log-probs and the optimizer
    step (bf16 moves them by bf16-sized amounts; float32 runs give identical results)."""
    from a5core.base.records import RolloutBatch
    from a5core.rl.grpo_config import GRPOConfig
    from a5core.rl.grpo_update import old_log_probs_for, optimizer_step

    model, tok = tiny
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in _prompts()[:2]]
    outputs = [tok(" 3 </think> <answer>3</answer>", add_special_tokens=False)["input_ids"]] * 2
    batch = RolloutBatch(prompts, outputs, torch.tensor([1.0, 0.0]), torch.tensor([1.0, -1.0]), 0)
    cfg = GRPOConfig(rollout_batch_size=2, group_size=2, train_batch_size=2, gradient_accumulation_steps=1)
    bf16 = Compute(autocast=autocast.resolved("bf16", quiet=True))

    def update(compute: Compute) -> tuple[torch.Tensor, torch.Tensor]:
        m = copy.deepcopy(model).train()
        old = torch.cat(old_log_probs_for(m, batch, 2, torch.device("cpu"), compute))
        optimizer_step(m, torch.optim.SGD(m.parameters(), lr=1.0), cfg, [0, 1], batch, torch.device("cpu"), compute)
        return old, torch.cat([p.detach().flatten() for p in m.parameters()])

    (old32, w32), (old32b, w32b), (old16, w16) = update(Compute()), update(Compute()), update(bf16)
    assert torch.equal(old32, old32b) and torch.equal(w32, w32b)
    assert 0 < (old16 - old32).abs().max() < 0.5 and not torch.equal(w16, w32)


def test_lora_adapters_beside_bf16_weights_run_under_the_mode():
    """bf16 weights record no autocast (every matmul is bf16 already), but their float32 LoRA adapters run under the
    mode as float32 weights would: the context gets `autocast_on`, not the record's `bf16_autocast`."""
    compute = Compute.of(ModelConfig(dtype="bfloat16", autocast="bf16"), "cpu", quiet=True)
    assert not compute.bf16_autocast and compute.autocast_on
    adapted = torch.nn.Sequential(
        torch.nn.Linear(2, 2).to(torch.bfloat16), torch.nn.Linear(2, 2)
    )  # + a float32 adapter
    with autocast_context(adapted, compute.autocast_on):
        assert torch.is_autocast_enabled("cpu")
    off = Compute.of(ModelConfig(dtype="bfloat16", autocast="off"), "cpu", quiet=True)
    with autocast_context(adapted, off.autocast_on):
        assert not torch.is_autocast_enabled("cpu")
