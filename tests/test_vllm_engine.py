"""The vLLM backend against the real engine (vLLM's CPU build, in-process, `enforce_eager`), on a tiny Llama.

Marked `vllm_engine` (`pytest -m vllm_engine` runs them). A missing engine fails these tests: nothing here is faked.
One engine serves the module (it takes ~20 s to start); tests that change its weights put the originals back.
"""

import copy

import pytest
import torch

from a5core.config import GenerationConfig, SamplingConfig
from a5core.generation import vllm as vllm_backend
from a5core.generation.hf import HFBackend
from a5core.generation.vllm import VLLMBackend, WeightSyncError
from a5core.prompts import build_prompt

pytestmark = pytest.mark.vllm_engine

PROMPTS = [build_prompt("Compute 1 + 2."), build_prompt("Solve for x: 3x = 9."), build_prompt("What is 7 * 8?")]


@pytest.fixture(scope="module")
def engine(tmp_path_factory, sharp):
    """(backend, policy, tokenizer): an engine built from the saved sharp tiny model, and that model."""
    model, tok = sharp
    folder = tmp_path_factory.mktemp("engine_model")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    backend = VLLMBackend(
        str(folder), GenerationConfig(backend="vllm", sync_tolerance=1e-3), seed=0, tokenizer=tok, policy=model
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
    raw = backend.llm.generate(PROMPTS, backend.request_params(sampling, len(PROMPTS)), use_tqdm=False)
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
    monkeypatch.setattr(vllm_backend, "_reload_on_worker", lambda worker, weights: True)  # a silent no-op
    with pytest.raises(WeightSyncError, match="not running the policy's weights"):
        backend.sync_weights(policy)


def test_a_small_step_the_engine_missed_is_caught_exactly(engine, restore, monkeypatch):
    """An update far below the log-prob probe's resolution (one optimizer step at a small learning rate) that never
    reached the engine: the probe passes, the exact comparison of the engine's parameters does not."""
    backend, _, _ = engine
    policy = restore
    weights = [(name, t.detach()) for name, t in policy.state_dict().items()]
    assert backend.verify_exact(weights) >= 4  # the CPU build keeps the norms and embeddings in the policy's layout
    with torch.no_grad():
        policy.model.norm.weight.mul_(1 + 1e-5)
    monkeypatch.setattr(vllm_backend, "_reload_on_worker", lambda worker, weights: True)  # a silent no-op
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
