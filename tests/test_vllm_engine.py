"""The vLLM backend against the real engine (vLLM's CPU build, in-process, `enforce_eager`), on a tiny Llama.

Marked `vllm_engine` (`pytest -m vllm_engine` runs them). A missing engine fails these tests: nothing here is faked.
One engine serves the module (it takes ~20 s to start); tests that change its weights put the originals back.
The tiny Llama has biases on its projections (as Qwen2's q/k/v have): the CPU build repacks linear weights away but
keeps the fused biases, so the exact check's concatenation of q/k/v and gate/up is exercised on the real engine.
Its tokenizer adds a BOS to text (as Llama's does), so every test also checks that rollouts use training's ids.
"""

import copy
import logging
import os
import subprocess
import sys

import pytest
import torch
from tokenizers import processors
from transformers import LlamaForCausalLM

from a5core.config.prompts import build_prompt
from a5core.config.sections import GenerationConfig, SamplingConfig
from a5core.generation import vllm as vllm_backend
from a5core.generation import vllm_weights
from a5core.generation.hf import HFBackend
from a5core.generation.vllm import VLLMBackend, WeightSyncError
from a5core.model.microbatch import Cut
from a5core.model.tokenization import tokenize_prompt_and_output

pytestmark = pytest.mark.vllm_engine

PROMPTS = [build_prompt("Compute 1 + 2."), build_prompt("Solve for x: 3x = 9."), build_prompt("What is 7 * 8?")]


NO_OP = {"absent": [], "not_loaded": []}  # what a reload that loads nothing and reports nothing returns


def bos_tokenizer(tok):
    """A copy of the tiny tokenizer that adds a BOS (its one special token) to every text it encodes."""
    bos = copy.deepcopy(tok)
    bos.bos_token = tok.eos_token
    bos.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos.bos_token} $A", pair=f"{bos.bos_token} $A $B", special_tokens=[(bos.bos_token, bos.bos_token_id)]
    )
    return bos


def biased(model):
    """The model with random biases on q/k/v/o and the MLP's projections (eval mode)."""
    config = copy.deepcopy(model.config)
    config.attention_bias, config.mlp_bias = True, True
    torch.manual_seed(1)
    out = LlamaForCausalLM(config)
    out.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        for name, p in out.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.5)
    return out.eval()


@pytest.fixture(scope="module")
def engine(tmp_path_factory, sharp):
    """(backend, policy, tokenizer): an engine built from the saved sharp tiny model (biased, with a BOS-adding
    tokenizer), and that model and tokenizer."""
    model, tok = biased(sharp[0]), bos_tokenizer(sharp[1])
    folder = tmp_path_factory.mktemp("engine_model")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    backend = VLLMBackend(
        str(folder),
        GenerationConfig(backend="vllm", sync_tolerance=1e-3),
        seed=0,
        tokenizer=tok,
        policy=model,
        cut=Cut(),
    )
    return backend, model, tok


@pytest.fixture
def restore(engine):
    """Gives a copy of the policy to change; the engine gets the original weights back afterwards."""
    backend, model, _ = engine
    yield copy.deepcopy(model)
    backend.sync_weights(model)


def _greedy(n_tokens: int, stop=(), min_tokens: int = 0) -> SamplingConfig:
    return SamplingConfig(temperature=0.0, max_tokens=n_tokens, min_tokens=min_tokens, stop=tuple(stop))


def _policy_greedy(model, tok, prompt: str, n_tokens: int) -> list[int]:
    ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=n_tokens,
        min_new_tokens=n_tokens,
        do_sample=False,
        pad_token_id=tok.pad_token_id,
    )
    return out[0, ids.shape[1] :].tolist()


def _stop_piece(tok, ids: list[int], first: int) -> tuple[str, int]:
    """A piece of decoded text that first appears in `ids` at token k >= first: (piece, k)."""
    for k in range(first, len(ids)):
        piece = tok.decode(ids[k : k + 1])
        if piece.strip() and piece not in tok.decode(ids[:k]) and piece not in tok.decode(ids[k + 1 :]):
            return piece, k
    pytest.fail(f"no usable stop piece in {ids}")


def test_greedy_tokens_equal_the_policy(engine):
    backend, model, tok = engine
    out = backend.generate(PROMPTS, _greedy(12), progress=False)
    for prompt, completions in zip(PROMPTS, out):
        assert list(completions[0].token_ids) == _policy_greedy(model, tok, prompt, 12)
        assert completions[0].finish_reason == "length"


def test_stop_string_is_kept_and_ends_the_ids(engine):
    backend, _, tok = engine
    ids = list(backend.generate(PROMPTS[:1], _greedy(16), progress=False)[0][0].token_ids)
    piece, k = _stop_piece(tok, ids, first=4)
    c = backend.generate(PROMPTS[:1], _greedy(16, stop=[piece]), progress=False)[0][0]
    assert c.finish_reason == "stop" and c.text.endswith(piece)
    assert list(c.token_ids) == ids[: k + 1]  # exactly the sampled ids, up to the one completing the stop string
    assert c.text == tok.decode(ids[: k + 1])[: len(c.text)]


def test_min_tokens_holds_back_a_stop_string(engine):
    backend, _, tok = engine
    ids = list(backend.generate(PROMPTS[:1], _greedy(16), progress=False)[0][0].token_ids)
    piece, k = _stop_piece(tok, ids, first=1)
    early = backend.generate(PROMPTS[:1], _greedy(16, stop=[piece]), progress=False)[0][0]
    held = backend.generate(PROMPTS[:1], _greedy(16, stop=[piece], min_tokens=k + 3), progress=False)[0][0]
    assert len(early.token_ids) == k + 1 and len(held.token_ids) >= k + 3


def test_samples_differ_across_samples_and_prompts_and_repeat_with_the_seed(engine):
    backend, _, _ = engine
    sampling = SamplingConfig(temperature=1.0, max_tokens=8, min_tokens=8, stop=(), n=4, seed=3)
    same_prompt_twice = [PROMPTS[0], PROMPTS[0]]
    a, b = backend.generate(same_prompt_twice, sampling, progress=False)
    assert len({c.token_ids for c in a}) > 1  # n samples of one request differ
    assert [c.token_ids for c in a] != [c.token_ids for c in b]  # two requests draw from different streams
    again = backend.generate(same_prompt_twice, sampling, progress=False)
    assert [c.token_ids for c in again[0]] == [c.token_ids for c in a]  # the seed fixes them


def test_token_ids_are_what_the_engine_sampled(engine):
    backend, _, tok = engine
    sampling = SamplingConfig(temperature=1.0, max_tokens=10, min_tokens=2, stop=("</answer>",), n=2, seed=5)
    ours = backend.generate(PROMPTS, sampling, progress=False)
    # the same requests as ours (token prompts: text would get the tokenizer's special tokens, whose slightly different
    # logits flip a sampled token wherever a draw lands near a boundary) on the same, freshly reset, prefix cache
    assert backend.llm.reset_prefix_cache()
    requests = backend.token_prompts(PROMPTS)
    raw = backend.llm.generate(requests, backend.request_params(sampling, len(PROMPTS)), use_tqdm=False)
    for mine, theirs in zip(ours, raw):
        assert [c.token_ids for c in mine] == [tuple(o.token_ids) for o in theirs.outputs]
        assert [c.text for c in mine] == [o.text for o in theirs.outputs]


def test_weight_sync_round_trip_and_prefix_cache_reset(engine, restore):
    backend, _, tok = engine
    policy = restore
    before = backend.generate(PROMPTS, _greedy(10), progress=False)  # fills the prefix cache with these prompts
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * p.std())
    backend.sync_weights(policy)  # verifies, so a stale engine would raise here
    after = backend.generate(PROMPTS, _greedy(10), progress=False)
    for prompt, old, new in zip(PROMPTS, before, after):
        assert list(new[0].token_ids) == _policy_greedy(policy, tok, prompt, 10)
        assert new[0].token_ids != old[0].token_ids
    assert backend.verify(policy) < 1e-4


def test_stale_prefix_cache_would_be_caught(engine, restore, monkeypatch):
    """Without the reset, cached prompt KV from the old weights changes the output: the reset is needed."""
    backend, _, tok = engine
    policy = restore
    prompt = [build_prompt("Compute 11 + 12, then double it. " * 40)]  # several KV blocks long
    backend.generate(prompt, _greedy(6), progress=False)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * p.std())
    checked = backend.cfg
    monkeypatch.setattr(backend.llm, "reset_prefix_cache", lambda *a, **k: True)
    monkeypatch.setattr(backend, "cfg", GenerationConfig(backend="vllm", verify_weight_sync=False))
    backend.sync_weights(policy)
    stale = backend.generate(prompt, _greedy(6), progress=False)[0][0].token_ids
    monkeypatch.undo()
    assert backend.cfg is checked
    backend.sync_weights(policy)
    fresh = backend.generate(prompt, _greedy(6), progress=False)[0][0].token_ids
    assert list(fresh) == _policy_greedy(policy, tok, prompt[0], 6)
    assert stale != fresh


def test_a_sync_that_does_not_reach_the_engine_raises(engine, restore, monkeypatch):
    backend, _, _ = engine
    policy = restore
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * p.std())
    monkeypatch.setattr(vllm_backend, "reload_on_worker", lambda worker, weights: NO_OP)  # a silent no-op
    with pytest.raises(WeightSyncError, match="not running the policy's weights"):
        backend.sync_weights(policy)


def test_a_small_step_the_engine_missed_is_caught_exactly(engine, restore, monkeypatch):
    """An update far below the log-prob probe's resolution (one optimizer step at a small learning rate) that never
    reached the engine: the probe passes, the exact comparison of the engine's parameters does not."""
    backend, _, _ = engine
    policy = restore
    weights = [(name, t.detach()) for name, t in policy.state_dict().items()]
    assert backend.verify_exact(weights) == 14  # CPU: embedding, 5 norms, 2 x (qkv, o, gate_up, down) biases
    with torch.no_grad():
        policy.model.norm.weight.mul_(1 + 1e-5)
    monkeypatch.setattr(vllm_backend, "reload_on_worker", lambda worker, weights: NO_OP)  # a silent no-op
    assert backend.verify(policy) < backend.cfg.sync_tolerance
    with pytest.raises(WeightSyncError, match=r"1 engine parameters differ .*model\.norm\.weight"):
        backend.sync_weights(policy)


def test_many_long_seeded_requests_in_one_call(engine):
    """More prompt tokens than one engine step schedules: with chunked prefill, the CPU build rewinds the seeded
    generator of a split prompt and fails ("CPU Generator does not use offset"); the backend turns it off."""
    backend, _, _ = engine
    prompts = [build_prompt(f"Question {i}: " + "compute the sum of the first numbers, " * 30) for i in range(40)]
    out = backend.generate(
        prompts, SamplingConfig(temperature=1.0, max_tokens=4, min_tokens=4, stop=(), n=2, seed=1), progress=False
    )
    assert [len(c) for c in out] == [2] * 40 and all(len(c.token_ids) == 4 for cs in out for c in cs)


def test_hf_and_engine_agree_on_greedy_ids(engine):
    """The two backends return the same kind of ids: greedy, they are equal token for token."""
    backend, model, tok = engine
    hf = HFBackend(model, tok, batch_size=8).generate(PROMPTS, _greedy(12), progress=False)
    eng = backend.generate(PROMPTS, _greedy(12), progress=False)
    assert [c[0].token_ids for c in hf] == [c[0].token_ids for c in eng]


def _weights(policy) -> list:
    return [(name, t.detach()) for name, t in policy.state_dict().items()]


def test_rollouts_get_the_prompt_ids_training_uses(engine, monkeypatch):
    """The tokenizer adds a BOS to text, as vLLM would to a text prompt; training encodes without it, and so must
    the engine's requests: the ids it ran on are training's, for generation and for prompt log-probs."""
    backend, model, tok = engine
    assert backend.llm.get_tokenizer()(PROMPTS[0])["input_ids"][0] == tok.bos_token_id  # the engine would add it
    ran, generate = [], backend.llm.generate

    def recording(*args, **kwargs):
        outputs = generate(*args, **kwargs)
        ran.extend(list(o.prompt_token_ids) for o in outputs)
        return outputs

    monkeypatch.setattr(backend.llm, "generate", recording)
    out = backend.generate(PROMPTS, _greedy(6), progress=False)
    training = tokenize_prompt_and_output(PROMPTS, [c[0].text for c in out], tok)
    for i, ids in enumerate(ran):
        n_prompt = int(training["response_mask"][i].nonzero()[0]) + 1  # label t is output token t + 1
        assert ids == training["input_ids"][i, :n_prompt].tolist() and ids[0] != tok.bos_token_id
    assert backend.verify(model) < 1e-4  # the probe's prompt log-probs: ids in, no BOS added


def test_the_exact_check_refuses_to_compare_too_few(engine):
    backend, model, _ = engine
    renamed = [("base_model." + name, t) for name, t in _weights(model)]  # nothing matches an engine name
    with pytest.raises(WeightSyncError, match=r"on layout cpu compared 0 of the engine's 22 parameters, fewer than"):
        backend.verify_exact(renamed)
    no_norms = [(name, t) for name, t in _weights(model) if not name.endswith("norm.weight")]
    with pytest.raises(WeightSyncError, match=r"compared 9 .* fewer than the 14 it requires"):
        backend.verify_exact(no_norms)


@pytest.mark.parametrize(
    ("changed", "fused"),
    [("self_attn.k_proj.bias", "self_attn.qkv_proj.bias"), ("mlp.up_proj.bias", "mlp.gate_up_proj.bias")],
)
def test_a_fused_projection_that_differs_is_caught(engine, changed, fused):
    """The engine's fused bias is compared with torch.cat of the policy's parts: one part off by one small step."""
    backend, model, _ = engine
    assert backend.verify_exact(_weights(model)) == 14
    policy = copy.deepcopy(model)
    with torch.no_grad():
        policy.get_parameter(f"model.layers.1.{changed}").mul_(1 + 1e-5)
    with pytest.raises(WeightSyncError, match=rf"1 engine parameters differ .*model\.layers\.1\.{fused}"):
        backend.verify_exact(_weights(policy))


def test_an_update_missing_a_tensor_is_refused_before_loading(engine):
    backend, model, _ = engine
    partial = [(name, t) for name, t in _weights(model) if name != "model.layers.0.self_attn.k_proj.weight"]
    with pytest.raises(WeightSyncError, match=r"no tensor for engine parameters \['model\.layers\.0\.self_attn\.qkv"):
        backend.load_weights(partial)


def test_what_vllm_did_not_load_is_reported_even_with_its_logging_off(engine, restore):
    """Past the backend's own check, a weight vLLM's reload never reached is returned from the worker: from the
    loaded-names set and from vLLM's warnings, which are caught even when VLLM's log level hides them."""
    backend, _, _ = engine
    no_norm = [(name, t) for name, t in _weights(restore) if name != "model.norm.weight"]
    quiet, level = logging.getLogger("vllm"), logging.getLogger("vllm").level
    quiet.setLevel(logging.ERROR)
    try:
        (report,) = backend.llm.collective_rpc(vllm_weights.load_and_report, args=(no_norm,))
    finally:
        quiet.setLevel(level)
    assert report[0] == "model.norm.weight"
    assert any("Following weights were not loaded" in m and "model.norm.weight" in m for m in report[1:])


def test_a_prefix_cache_that_was_not_reset_is_an_error(engine, restore):
    """vLLM refuses to reset the prefix cache while a request holds KV blocks, and returns False."""
    backend, _, tok = engine
    engine_core = backend.llm.llm_engine
    params = backend.vllm.SamplingParams(max_tokens=64, min_tokens=64, temperature=0.0)
    ids = tok(PROMPTS[0], add_special_tokens=False)["input_ids"]
    rid = engine_core.add_request("running", backend.vllm.TokensPrompt(prompt_token_ids=ids), params)
    engine_core.step()  # scheduled: it now holds KV blocks
    try:
        with pytest.raises(WeightSyncError, match="prefix cache was not reset"):
            backend.sync_weights(restore)
    finally:
        engine_core.abort_request([rid])
        while engine_core.has_unfinished_requests():
            engine_core.step()


def test_sampled_token_log_probs_are_the_policys(engine):
    """GRPO's truncated importance sampling weighs each token by pi_train / pi_rollout: the engine's log-prob of
    each sampled id (raw, untempered) must be the policy's own, up to the kernels' numerics."""
    from a5core.model.logprobs import get_response_log_probs
    from a5core.model.tokenization import encode_prompts, tokenize_ids

    backend, model, tok = engine
    sampling = SamplingConfig(temperature=0.7, max_tokens=10, min_tokens=2, stop=("</answer>",), n=2, seed=5)
    out = backend.generate(PROMPTS, sampling, progress=False)
    for prompt_ids, completions in zip(encode_prompts(tok, PROMPTS), out):
        b = tokenize_ids([prompt_ids] * 2, [list(c.token_ids) for c in completions], tok.pad_token_id)
        with torch.no_grad():
            lp = get_response_log_probs(model, b["input_ids"], b["labels"])["log_probs"]  # (2, T)
        for j, c in enumerate(completions):
            assert len(c.token_logprobs) == len(c.token_ids)
            assert c.token_logprobs == pytest.approx(lp[j][b["response_mask"][j]].tolist(), abs=1e-3)
    plain = backend.request_params(sampling, len(PROMPTS))
    for params in plain:
        params.logprobs = None  # asking for the log-probs does not change what is sampled
    raw = backend.llm.generate(backend.token_prompts(PROMPTS), plain, use_tqdm=False)
    assert [[c.token_ids for c in cs] for cs in out] == [[tuple(o.token_ids) for o in r.outputs] for r in raw]


def test_a_lora_policy_syncs_its_merged_weights(engine, restore):
    """LoRA (model.lora_rank): the engine gets the adapters merged under the base model's names, passes the exact
    check and the log-prob probe, and then generates what the LoRA policy does."""
    from a5core.model import lora

    backend, _, tok = engine
    policy = lora.attach(restore, 4, 8.0, ("q_proj", "v_proj", "down_proj"))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)  # B = 0 at the start: make the adapters change the model
    backend.sync_weights(policy)  # verifies exactly, and by log-probs
    out = backend.generate(PROMPTS[:1], _greedy(10), progress=False)
    assert list(out[0][0].token_ids) == _policy_greedy(policy, tok, PROMPTS[0], 10)


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory, sharp):
    """(backend, policy, state): a Qwen2-shaped tiny model (grouped-query attention, biases on q/k/v only, tied
    embeddings, as Qwen2.5-Math-1.5B) on vLLM's own Qwen2 class, and what building its engine did to the process's
    RNGs and TORCHINDUCTOR_COMPILE_THREADS (`state`: before and after)."""
    import os
    import random

    import numpy as np
    import torch._inductor.config as inductor
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = sharp[1]
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=128,  # head_dim 32: the CPU build's attention has no kernel for 16
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        max_position_embeddings=512,
    )
    torch.manual_seed(3)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.mul_(8.0) if not name.endswith(".bias") else p.normal_(0.0, 0.5)
    folder = tmp_path_factory.mktemp("qwen2_model")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)

    def state():
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
        return {
            "python": random.getstate(),
            "numpy": np.random.get_state()[1].tolist(),
            "torch": torch.random.get_rng_state().tolist(),
            "cuda": [s.tolist() for s in cuda],
            "TORCHINDUCTOR_COMPILE_THREADS": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS"),
            "compile_threads": inductor.compile_threads,
        }

    torch.manual_seed(12345)
    random.seed(12345)
    np.random.seed(12345)
    before = state()
    backend = VLLMBackend(
        str(folder),
        GenerationConfig(backend="vllm", sync_tolerance=1e-3),
        seed=7,
        tokenizer=tok,
        policy=model,
        cut=Cut(),
    )
    return backend, model, (before, state())


def test_building_the_engine_leaves_the_trainers_rngs_and_compile_threads(qwen2):
    """vLLM's worker reseeds every global RNG while it starts (stochastic rounding draws from CUDA's; a resumed run
    would draw other numbers than an uninterrupted one) and `import vllm` sets TORCHINDUCTOR_COMPILE_THREADS=1."""
    before, after = qwen2[2]
    for key in before:
        assert after[key] == before[key], f"building the engine changed {key}"


def test_qwen2s_fused_qkv_biases_are_synced_and_checked_exactly(qwen2):
    """The bias rows of vLLM's fused qkv_proj (q, then k, then v, with fewer k/v heads than q heads) against the
    policy's three biases: a synced update passes the exact check; a k bias the engine did not get is caught."""
    backend, model, _ = qwen2
    changed = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in changed.named_parameters():
            if name.endswith(".bias"):
                p.add_(0.25)
    try:
        backend.sync_weights(changed)  # the exact check and the log-prob probe (verify_weight_sync)
        (result,) = backend.llm.collective_rpc(vllm_weights.compare_on_worker, args=(_whole(changed),))
        fused = [n for n in result["compared"] if n.endswith("qkv_proj.bias")]
        assert len(fused) == 2 and not result["differ"]
        stale = copy.deepcopy(changed)
        with torch.no_grad():
            stale.model.layers[1].self_attn.k_proj.bias[0] += 1e-2  # the engine still holds the synced value
        (result,) = backend.llm.collective_rpc(vllm_weights.compare_on_worker, args=(_whole(stale),))
        assert result["differ"] == ["model.layers.1.self_attn.qkv_proj.bias"]
    finally:
        backend.sync_weights(model)


def _whole(model):
    return vllm_backend._whole(list(model.state_dict().items()))


def test_asynchronous_rollouts_come_from_the_version_the_rule_names(engine, restore, tmp_path, monkeypatch):
    """grpo.max_staleness 1 on the real engine, generating in the loop's rollout thread while the learner trains:
    step 0's rollouts are version 0's and step k's version k-1's. The engine's sampled-token log-probs are that
    version's (to the kernels' numerics) and ten times further from the next version's."""
    from tests.support.loops import Recorder, grpo_cfg, max_gap, run_grpo, sampled_log_probs

    backend, model, tok = engine
    rec = Recorder(monkeypatch, restore)
    cfg = grpo_cfg(n_grpo_steps=3, max_tokens=6, entropy_coef=0.05, lr=1e-2, max_staleness=1, tis_cap=2.0)
    _, history = run_grpo(restore, tok, tmp_path, cfg, backend=backend)
    assert [r["rollout/staleness"] for r in history.rows["train"]] == [0, 1, 1]
    for step, samples in enumerate(rec.samples):
        made_by = [torch.tensor(s.token_logprobs) for s in samples]
        gaps = [max_gap(made_by, sampled_log_probs(model, rec.versions[v], tok, samples)) for v in range(step + 1)]
        rule = max(step - 1, 0)
        assert gaps[rule] < 1e-3, (step, gaps)
        assert all(gap > 10 * gaps[rule] for v, gap in enumerate(gaps) if v != rule), (step, gaps)


FLASHINFER_PROBE = """
import importlib.util

assert importlib.util.find_spec("flashinfer") is None, "FlashInfer is installed here: the probe would prove nothing"
import vllm
from vllm.platforms import current_platform
from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

from a5core.config.sections import GenerationConfig
from a5core.generation.vllm import VLLMBackend
from a5core.model.microbatch import Cut


class Built(Exception):
    pass


def engine(**kwargs):  # what vLLM's engine does on CUDA when it builds its sampler, then stop
    TopKTopPSampler()
    raise Built


type(current_platform).is_cuda = lambda self: True  # vLLM's sampler takes its CUDA branch
vllm.LLM = engine
try:
    VLLMBackend("unused", GenerationConfig(), cut=Cut())
except Built:
    print("sampler built")
"""


def test_the_cuda_sampler_builds_without_flashinfer(tmp_path):
    """On CUDA, vLLM imports FlashInfer when it builds its sampler unless VLLM_USE_FLASHINFER_SAMPLER=0, and the
    offline bundle carries no FlashInfer: the backend sets the variable before the engine is built. vLLM's own
    sampler constructor runs with CUDA forced on, in a fresh process (vLLM reads the variable from the environment)."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_USE_FLASHINFER_SAMPLER"}
    done = subprocess.run([sys.executable, "-c", FLASHINFER_PROBE], env=env, capture_output=True, text=True)
    assert "No module named 'flashinfer'" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0 and "sampler built" in done.stdout, done.stderr[-2000:]
