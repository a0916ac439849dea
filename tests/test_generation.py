import logging

import pytest
import torch

from a5core.config.sections import GenerationConfig, SamplingConfig
from a5core.generation import HFBackend, truncate_at_stop
from a5core.generation.vllm import engine_device, engine_kwargs
from a5core.model.microbatch import Cut


def test_truncate_at_stop_keeps_stop_string():
    assert truncate_at_stop("a </answer> b", ["</answer>"]) == ("a </answer>", True)
    assert truncate_at_stop("abc", ["</answer>"]) == ("abc", False)


def test_hf_backend_n_samples_finish_reasons_and_stop(tiny):
    model, tok = tiny
    be = HFBackend(model, tok, batch_size=8)
    out = be.generate(
        ["Compute 1 + 2.", "Solve for x: 2x = 4."],
        SamplingConfig(max_tokens=6, min_tokens=6, n=3, stop=[]),
        progress=False,
    )
    assert [len(o) for o in out] == [3, 3]
    assert all(c.finish_reason == "length" and len(c.token_ids) == 6 for o in out for c in o)
    # _completion keeps the sampled ids as they are and cuts only the text after the stop string
    ids = tok(" 2 + 3 = 5. </think> <answer>5</answer> extra words", add_special_tokens=False)["input_ids"]
    fake_ent = [0.1 * i for i in range(len(ids))]
    c = be._completion(list(ids), fake_ent, SamplingConfig(stop=["</answer>"]))
    assert c.text == " 2 + 3 = 5. </think> <answer>5</answer>" and c.finish_reason == "stop"
    assert c.token_ids == tuple(ids) and c.token_entropies == tuple(fake_ent)
    c = be._completion(list(ids) + [tok.eos_token_id], fake_ent + [0.0], SamplingConfig(stop=["</nope>"]))
    assert c.finish_reason == "stop" and c.token_ids[-1] == tok.eos_token_id  # a sampled EOS is kept, as vLLM does
    c = be._completion(list(ids), fake_ent, SamplingConfig(stop=["</nope>"]))
    assert c.finish_reason == "length"


def test_hf_generation_stops_on_the_token_that_completes_the_stop_string(sharp):
    model, tok = sharp
    be = HFBackend(model, tok, batch_size=8)
    greedy = SamplingConfig(temperature=0.0, max_tokens=16, min_tokens=0, stop=())
    ids = list(be.generate(["Compute 1 + 2. <think>"], greedy, progress=False)[0][0].token_ids)
    k = next(
        k
        for k in range(3, len(ids))
        if tok.decode(ids[k : k + 1]).strip() and tok.decode(ids[k : k + 1]) not in tok.decode(ids[:k])
    )
    piece = tok.decode(ids[k : k + 1])
    c = be.generate(
        ["Compute 1 + 2. <think>"],
        SamplingConfig(temperature=0.0, max_tokens=16, min_tokens=0, stop=(piece,)),
        progress=False,
    )[0][0]
    assert list(c.token_ids) == ids[: k + 1] and c.text.endswith(piece) and c.finish_reason == "stop"


def test_hf_noise_is_per_request(tiny):
    """Each (prompt, sample) has its own stream: copies of a prompt differ, and a prompt's samples do not depend on
    which other prompts share its batch."""
    model, tok = tiny
    be = HFBackend(model, tok, batch_size=4)
    sampling = SamplingConfig(temperature=1.0, max_tokens=8, min_tokens=8, stop=(), n=2, seed=7)
    both = be.generate(["Compute 1 + 2.", "Compute 1 + 2.", "What is 3 * 4?"], sampling, progress=False)
    assert [c.token_ids for c in both[0]] != [c.token_ids for c in both[1]]
    assert both[0][0].token_ids != both[0][1].token_ids
    alone = HFBackend(model, tok, batch_size=1).generate(["Compute 1 + 2."], sampling, progress=False)
    assert [c.token_ids for c in alone[0]] == [c.token_ids for c in both[0]]


def test_shared_prefix_generation_equals_plain_generate(sharp):
    from a5core.config.prompts import build_prompt

    model, tok = sharp
    prompts = [build_prompt("Compute 1+2."), build_prompt("Solve 3x = 9 now please"), build_prompt("7*8")]
    out = HFBackend(model, tok, batch_size=8).generate(
        prompts, SamplingConfig(temperature=0.0, max_tokens=12, min_tokens=12, stop=[]), progress=False
    )
    for p, o in zip(prompts, out):
        ids = torch.tensor([tok(p, add_special_tokens=False)["input_ids"]])
        ref = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=12,
            min_new_tokens=12,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
        )[0, ids.shape[1] :].tolist()
        assert list(o[0].token_ids) == ref


def test_shared_prefix_log_probs_and_gradients_match(sharp):
    import copy

    from a5core.config.prompts import build_prompt
    from a5core.model.logprobs import get_response_log_probs, shared_prefix_length
    from a5core.model.tokenization import tokenize_prompt_and_output

    model, tok = copy.deepcopy(sharp[0]), sharp[1]
    b = tokenize_prompt_and_output(
        [build_prompt("Compute 1+2."), build_prompt("Solve 3x = 9 now")],
        [" 3 </think> <answer>3</answer>", " x=3"],
        tok,
    )
    assert shared_prefix_length(b["input_ids"]) > 8
    other = copy.deepcopy(model)
    a = get_response_log_probs(model, b["input_ids"], b["labels"], True)
    s = get_response_log_probs(other, b["input_ids"], b["labels"], True, share_prefix=True)
    assert torch.allclose(a["log_probs"], s["log_probs"], atol=1e-4) and torch.allclose(
        a["token_entropy"], s["token_entropy"], atol=1e-4
    )
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
    from a5core.base.records import GradedSample
    from a5core.config.prompts import build_prompt
    from a5core.run.evaluation import forward_entropies, response_entropies

    model, tok = tiny
    prompts = [build_prompt("Compute 1+2."), build_prompt("Solve 3x = 9 now please")]
    out = HFBackend(model, tok, batch_size=8).generate(
        prompts, SamplingConfig(max_tokens=10, min_tokens=3, n=2, stop=[]), progress=False
    )
    samples = [
        GradedSample(
            "q",
            j,
            p,
            c.text,
            "1",
            None,
            "wrong",
            0.0,
            0.0,
            0.0,
            len(c.token_ids),
            c.finish_reason,
            "",
            "",
            c.token_ids,
            c.token_entropies,
        )
        for p, cs in zip(prompts, out)
        for j, c in enumerate(cs)
    ]
    assert all(len(s.token_entropies) == len(s.token_ids) > 0 for s in samples)
    from_generation = response_entropies(model, tok, samples, cut=Cut())
    teacher_forced = forward_entropies(model, tok, samples, cut=Cut())
    assert from_generation == pytest.approx(teacher_forced, abs=1e-4)
    # without recorded entropies (the vLLM backend) the forward pass is used, for the first `limit` samples
    bare = [GradedSample(**{**s.__dict__, "token_entropies": None}) for s in samples]
    assert response_entropies(model, tok, bare, cut=Cut()) == pytest.approx(teacher_forced, abs=1e-6)
    assert response_entropies(model, tok, bare, limit=2, cut=Cut())[2:] == [None, None]


def test_engine_placement_per_layout():
    """two_gpu: the engine on the second GPU (and refused with one); one_gpu: sleep mode on the first; CPU: no GPU."""
    two, one = GenerationConfig(backend="vllm", layout="two_gpu"), GenerationConfig(backend="vllm", layout="one_gpu")
    assert (engine_device(two, 2), engine_device(one, 1), engine_device(two, 0)) == (1, 0, None)
    assert engine_kwargs(two, torch.float32, 2) == {
        "dtype": "bfloat16",
        "gpu_memory_utilization": 0.85,
        "enforce_eager": False,  # generation.cuda_graphs: vLLM's compiled model and CUDA graphs
        "device_ids": [1],
    }
    eager = GenerationConfig(backend="vllm", layout="one_gpu", cuda_graphs=False)
    assert engine_kwargs(eager, torch.float32, 1)["enforce_eager"] is True
    assert engine_kwargs(one, torch.float32, 1)["enable_sleep_mode"] is True
    with pytest.raises(RuntimeError, match="generation.layout=one_gpu"):
        engine_kwargs(two, torch.float32, 1)
    cpu = engine_kwargs(two, torch.bfloat16, 0)
    assert cpu["dtype"] == "bfloat16" and cpu["enforce_eager"] and not cpu["enable_chunked_prefill"]


def test_the_reload_warnings_of_vllm_0_26_and_0_33_are_both_heard():
    """0.26 logs the weights a reload missed from its GPU model runner, 0.32/0.33 from the reload modules: the hook
    hears both (what either logger says is the only trace of a layer the reload never reached), and only them."""
    from a5core.generation import vllm_weights

    v026 = logging.getLogger("vllm.v1.worker.gpu_model_runner")
    v033 = logging.getLogger("vllm.model_executor.model_loader.reload.inplace")
    other = logging.getLogger("vllm.v1.engine.core")
    with vllm_weights._loader_warnings() as heard:
        v026.warning("Following weights were not loaded from checkpoint: %s", {"model.norm.weight"})
        v033.warning("Following weights were not loaded from checkpoint: %s", {"lm_head.weight"})
        other.warning("Following weights were not loaded from checkpoint: %s", {"elsewhere"})
    assert [m.split(": ")[1] for m in heard] == ["{'model.norm.weight'}", "{'lm_head.weight'}"]


def test_a_colocated_wake_frees_the_reloads_memory_before_the_kv_cache(monkeypatch):
    """one_gpu: wake the weights, reload, reset the prefix cache, hand cached blocks back, then wake the KV cache
    (the CPU build refuses sleep mode, so the engine here records the calls it gets)."""
    from a5core.generation import vllm as vllm_backend

    calls = []

    class Engine:
        def wake_up(self, tags):
            calls.append(f"wake {tags[0]}")

        def collective_rpc(self, fn, args):
            calls.append("reload")
            return [{"absent": [], "not_loaded": []}]

        def reset_prefix_cache(self):
            calls.append("reset")
            return True

    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    backend = object.__new__(vllm_backend.VLLMBackend)
    backend.llm, backend.sleeping, backend.device = Engine(), True, None
    backend.load_weights([("w", torch.zeros(1))])
    assert calls == ["empty_cache", "wake weights", "reload", "reset", "empty_cache", "wake kv_cache"]
    assert backend.sleeping is False
