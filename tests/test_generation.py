from types import SimpleNamespace

import pytest
import torch

from a5core.config import GenerationConfig, SamplingConfig
from a5core.generation import HFBackend, truncate_at_stop
from a5core.generation.vllm import VLLMBackend, WeightSyncError


def test_truncate_at_stop_keeps_stop_string():
    assert truncate_at_stop("a </answer> b", ["</answer>"]) == ("a </answer>", True)
    assert truncate_at_stop("abc", ["</answer>"]) == ("abc", False)


def test_hf_backend_n_samples_finish_reasons_and_stop(tiny):
    model, tok = tiny
    be = HFBackend(model, tok, batch_size=8)
    out = be.generate(["Compute 1 + 2.", "Solve for x: 2x = 4."], SamplingConfig(max_tokens=6, min_tokens=6, n=3, stop=[]), progress=False)
    assert [len(o) for o in out] == [3, 3]
    assert all(c.finish_reason == "length" and len(c.token_ids) == 6 for o in out for c in o)
    # Stop handling on generated ids: text is cut right after the stop string, ids past it are dropped.
    ids = tok(" 2 + 3 = 5. </think> <answer>5</answer> extra words", add_special_tokens=False)["input_ids"]
    fake_ent = [0.1 * i for i in range(len(ids))]
    c = be._completion(list(ids), fake_ent, SamplingConfig(stop=["</answer>"]))
    assert c.text == " 2 + 3 = 5. </think> <answer>5</answer>" and c.finish_reason == "stop"
    assert tok.decode(list(c.token_ids)) == c.text
    assert c.token_entropies == tuple(fake_ent[: len(c.token_ids)])  # entropies follow the kept tokens
    c = be._completion(list(ids) + [tok.eos_token_id, tok.eos_token_id], fake_ent + [0.0, 0.0], SamplingConfig(stop=["</nope>"]))
    assert c.finish_reason == "stop" and len(c.token_ids) == len(ids)  # eos ends it
    c = be._completion(list(ids), fake_ent, SamplingConfig(stop=["</nope>"]))
    assert c.finish_reason == "length"


class FakeLLM:
    """Stands in for vllm.LLM: records requests; 'generates' from the weights it was given."""

    def __init__(self):
        self.requests, self.weights, self.prefix_resets = [], None, 0

    def generate(self, prompts, params, use_tqdm=True):
        self.requests.append((prompts, params))
        tok = 5 if self.weights is None else int(self.weights[0][1].flatten()[0].item() * 0) + 9
        out = SimpleNamespace(text="x </answer>", token_ids=[tok] * params.max_tokens, finish_reason="stop")
        return [SimpleNamespace(outputs=[out] * params.n) for _ in prompts]

    def collective_rpc(self, fn, args=()):
        worker = SimpleNamespace(model_runner=SimpleNamespace(model=SimpleNamespace(load_weights=lambda weights: setattr(self, "weights", weights))))
        return [fn(worker, *args)]

    def reset_prefix_cache(self):
        self.prefix_resets += 1


FAKE_VLLM = SimpleNamespace(SamplingParams=lambda **kw: SimpleNamespace(**kw))


def test_vllm_request_building():
    llm = FakeLLM()
    be = VLLMBackend("unused", GenerationConfig(backend="vllm"), llm=llm, vllm_module=FAKE_VLLM)
    out = be.generate(["p1", "p2"], SamplingConfig(n=2, max_tokens=7, min_tokens=4, seed=3), progress=False)
    prompts, params = llm.requests[0]
    assert prompts == ["p1", "p2"] and params.stop == ["</answer>"] and params.include_stop_str_in_output
    assert (params.n, params.min_tokens, params.max_tokens, params.seed) == (2, 4, 7, 3)
    assert len(out[0]) == 2 and out[0][0].finish_reason == "stop" and out[0][0].text.endswith("</answer>")


def test_vllm_weight_sync_and_verification(tiny):
    model, tok = tiny
    llm = FakeLLM()
    be = VLLMBackend("unused", GenerationConfig(backend="vllm", verify_weight_sync=True), llm=llm, vllm_module=FAKE_VLLM, tokenizer=tok)
    with pytest.raises(WeightSyncError):  # the fake engine's greedy tokens are not the policy's
        be.sync_weights(model)
    names = [n for n, _ in llm.weights]
    assert names == list(model.state_dict()) and llm.prefix_resets == 1
    # an engine that reproduces the policy passes verification
    ids = torch.tensor([tok("User: What is 2 + 3?\nAssistant: <think>", add_special_tokens=False)["input_ids"]])
    greedy = model.generate(input_ids=ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)[0, ids.shape[1]:].tolist()
    llm.generate = lambda prompts, params, use_tqdm=True: [SimpleNamespace(outputs=[SimpleNamespace(text="", token_ids=greedy, finish_reason="length")])]
    be.sync_weights(model)


def _sharp(tiny):
    """The tiny model with weights scaled up, so greedy outputs vary from token to token."""
    import copy

    model = copy.deepcopy(tiny[0])
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0)
    return model.eval(), tiny[1]


def test_shared_prefix_generation_equals_plain_generate(tiny):
    from a5core.prompts import build_prompt

    model, tok = _sharp(tiny)
    prompts = [build_prompt("Compute 1+2."), build_prompt("Solve 3x = 9 now please"), build_prompt("7*8")]
    out = HFBackend(model, tok, batch_size=8).generate(prompts, SamplingConfig(temperature=0.0, max_tokens=12, min_tokens=12, stop=[]), progress=False)
    for p, o in zip(prompts, out):
        ids = torch.tensor([tok(p, add_special_tokens=False)["input_ids"]])
        ref = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, min_new_tokens=12,
                             do_sample=False, pad_token_id=tok.pad_token_id)[0, ids.shape[1]:].tolist()
        assert list(o[0].token_ids) == ref


def test_shared_prefix_log_probs_and_gradients_match(tiny):
    import copy

    from a5core.logprobs import get_response_log_probs, shared_prefix_length
    from a5core.prompts import build_prompt
    from a5core.tokenization import tokenize_prompt_and_output

    model, tok = _sharp(tiny)
    b = tokenize_prompt_and_output([build_prompt("Compute 1+2."), build_prompt("Solve 3x = 9 now")], [" 3 </think> <answer>3</answer>", " x=3"], tok)
    assert shared_prefix_length(b["input_ids"]) > 8
    other = copy.deepcopy(model)
    a = get_response_log_probs(model, b["input_ids"], b["labels"], True)
    s = get_response_log_probs(other, b["input_ids"], b["labels"], True, share_prefix=True)
    assert torch.allclose(a["log_probs"], s["log_probs"], atol=1e-4) and torch.allclose(a["token_entropy"], s["token_entropy"], atol=1e-4)
    (a["log_probs"] * b["response_mask"]).sum().backward()
    (s["log_probs"] * b["response_mask"]).sum().backward()
    for p, q in zip(model.parameters(), other.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-4, rtol=1e-3)


def test_top_p_keeps_the_nucleus():
    from a5core.generation.hf import sample_next

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    torch.manual_seed(0)
    draws = {int(sample_next(logits, 1.0, 0.7)) for _ in range(200)}
    assert draws == {0, 1}
    assert int(sample_next(logits, 0.0, 1.0)) == 0


def test_sampling_follows_the_softmax_distribution():
    from a5core.generation.hf import sample_next

    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = torch.log(p).repeat(4000, 1)  # (4000, 4): one draw per row
    torch.manual_seed(0)
    freq = torch.bincount(torch.cat([sample_next(logits, 1.0, 1.0) for _ in range(5)]), minlength=4).float() / 20000
    assert torch.allclose(freq, p, atol=0.015)  # binomial std <= 0.0036 per cell
    hot = torch.log(torch.tensor([[0.5, 0.5, 0.0, 0.0]]))  # zero-probability tokens are never drawn
    assert {int(sample_next(hot, 1.0, 1.0)) for _ in range(100)} <= {0, 1}
    sharp = sample_next(torch.log(p).repeat(2000, 1), 0.25, 1.0)  # low temperature concentrates on the mode
    assert (sharp == 0).float().mean() > 0.85


def test_generation_entropies_equal_a_teacher_forced_pass(tiny):
    """The entropies the hf backend records while sampling are the ones a forward pass over the output gives."""
    from a5core.evaluation import forward_entropies, response_entropies
    from a5core.prompts import build_prompt

    model, tok = tiny
    prompts = [build_prompt("Compute 1+2."), build_prompt("Solve 3x = 9 now please")]
    out = HFBackend(model, tok, batch_size=8).generate(prompts, SamplingConfig(max_tokens=10, min_tokens=3, n=2, stop=[]), progress=False)
    records = [{"prompt": p, "token_ids": c.token_ids, "token_entropies": c.token_entropies} for p, cs in zip(prompts, out) for c in cs]
    assert all(len(r["token_entropies"]) == len(r["token_ids"]) > 0 for r in records)
    from_generation = response_entropies(model, tok, records)
    teacher_forced = forward_entropies(model, tok, records)
    assert from_generation == pytest.approx(teacher_forced, abs=1e-4)
    # without recorded entropies (the vLLM backend) the forward pass is used
    assert response_entropies(model, tok, [{**r, "token_entropies": None} for r in records]) == pytest.approx(teacher_forced, abs=1e-6)
