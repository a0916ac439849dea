"""Hand-computed checks of the handout primitives."""

import math

import pytest
import torch

from a5core.handout import (
    compute_entropy,
    compute_group_normalized_rewards,
    compute_grpo_clip_loss,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
    get_response_log_probs,
    grpo_microbatch_train_step,
    masked_mean,
    masked_normalize,
    sft_microbatch_train_step,
    tokenize_prompt_and_output,
)
from a5core.model.tokenization import tokenize_ids


def test_tokenize_layout_and_mask():
    out = tokenize_ids([[1, 2, 3], [4]], [[5, 6], [7, 8, 9]], pad_id=0)
    assert out["input_ids"].tolist() == [[1, 2, 3, 5], [4, 7, 8, 9]]
    assert out["labels"].tolist() == [[2, 3, 5, 6], [7, 8, 9, 0]]
    # first output token (label 5, predicted from prompt position 2) is in the mask; padding is not
    assert out["response_mask"].tolist() == [[False, False, True, True], [True, True, True, False]]


def test_tokenize_with_tokenizer(tiny):
    _, tok = tiny
    out = tokenize_prompt_and_output(["Compute 1+2."], [" 3 </think>"], tok)
    p = tok("Compute 1+2.", add_special_tokens=False)["input_ids"]
    o = tok(" 3 </think>", add_special_tokens=False)["input_ids"]
    assert out["input_ids"].shape == (1, len(p) + len(o) - 1)
    assert int(out["response_mask"].sum()) == len(o)


def test_entropy_uniform_and_extreme():
    logits = torch.zeros(1, 1, 4)
    assert torch.allclose(compute_entropy(logits), torch.tensor([[math.log(4)]]), atol=1e-6)
    big = torch.tensor([[[1e4, -1e4, 0.0]]])
    h = compute_entropy(big)
    assert torch.isfinite(h).all() and abs(float(h)) < 1e-5


def test_masked_reductions():
    t = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = torch.tensor([[1, 1, 0], [0, 1, 1]])
    assert float(masked_normalize(t, m, 2.0)) == pytest.approx((1 + 2 + 5 + 6) / 2)
    assert masked_normalize(t, m, 1.0, dim=1).tolist() == [3.0, 11.0]
    assert masked_mean(t, m, dim=1).tolist() == [1.5, 5.5]
    assert float(masked_mean(t, m)) == pytest.approx(14 / 4)


def test_sft_step_value_and_gradient():
    lp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -4.0]], requires_grad=True)
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]])
    loss, _ = sft_microbatch_train_step(lp, mask, gradient_accumulation_steps=2, normalize_constant=2.0)
    assert float(loss) == pytest.approx(((5 / 2) + (1 / 2)) / 2 / 2)
    assert lp.grad.tolist() == [[0.0, -0.125, -0.125], [-0.125, -0.125, 0.0]]


def test_all_zero_mask_raises():
    lp = torch.zeros(2, 3, requires_grad=True)
    with pytest.raises(ValueError, match="no response tokens"):
        sft_microbatch_train_step(lp, torch.zeros(2, 3), 1)
    with pytest.raises(ValueError, match="no response tokens"):
        grpo_microbatch_train_step(lp, torch.zeros(2, 3), 1, "no_baseline", raw_rewards=torch.ones(2, 1))


def test_group_normalized_rewards_unbiased_and_population():
    fn = lambda r, g: {"reward": float(r == g), "format_reward": 1.0, "answer_reward": float(r == g)}  # noqa: E731
    adv, raw, meta = compute_group_normalized_rewards(fn, ["a", "b", "a", "a"], ["a"] * 4, 2, 1e-6, True)
    assert raw.tolist() == [1, 0, 1, 1]
    s = torch.tensor([1.0, 0.0]).std()  # unbiased: 0.7071
    assert adv[:2].tolist() == pytest.approx([0.5 / (float(s) + 1e-6), -0.5 / (float(s) + 1e-6)])
    assert adv[2:].tolist() == [0.0, 0.0]
    assert meta["frac_groups_all_equal"] == 0.5 and meta["reward_mean"] == 0.75
    adv0, _, _ = compute_group_normalized_rewards(fn, ["a", "b"], ["a", "a"], 2, 0.0, True, std_ddof=0)
    assert adv0.tolist() == pytest.approx([1.0, -1.0])
    adv_c, _, _ = compute_group_normalized_rewards(fn, ["a", "b"], ["a", "a"], 2, 1e-6, False)
    assert adv_c.tolist() == [0.5, -0.5]


def test_naive_pg_loss():
    a = torch.tensor([[2.0], [-1.0]])
    lp = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    assert compute_naive_policy_gradient_loss(a, lp).tolist() == [[2.0, 4.0], [-3.0, -4.0]]


def test_grpo_clip_zero_gradient_when_clipped():
    adv = torch.tensor([[1.0], [-1.0]])
    old = torch.zeros(2, 1)
    lp = torch.tensor([[math.log(1.5)], [math.log(0.5)]], requires_grad=True)  # rho 1.5 (>1.2), 0.5 (<0.8)
    loss, meta = compute_grpo_clip_loss(adv, lp, old, 0.2)
    loss.sum().backward()
    assert lp.grad.tolist() == [[0.0], [0.0]]
    assert meta["clipped"].tolist() == [[True], [True]]
    assert loss.detach().flatten().tolist() == pytest.approx([-1.2, 0.8])


def test_grpo_clip_unclipped_inside_range():
    lp = torch.tensor([[0.05]], requires_grad=True)
    loss, meta = compute_grpo_clip_loss(torch.tensor([[2.0]]), lp, torch.zeros(1, 1), 0.2)
    loss.sum().backward()
    assert float(lp.grad) == pytest.approx(-2 * math.exp(0.05))
    assert not bool(meta["clipped"].any())


def test_policy_gradient_dispatch_and_missing_args():
    lp = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="raw_rewards"):
        compute_policy_gradient_loss(lp, "no_baseline")
    with pytest.raises(ValueError, match="old_log_probs"):
        compute_policy_gradient_loss(lp, "grpo_clip", advantages=torch.ones(1, 1), cliprange=0.2)
    with pytest.raises(ValueError, match="cliprange"):
        compute_policy_gradient_loss(lp, "grpo_clip", advantages=torch.ones(1, 1), old_log_probs=lp)
    loss, _ = compute_policy_gradient_loss(lp, "grpo_no_clip", advantages=torch.full((1, 1), 3.0), old_log_probs=lp)
    assert loss.tolist() == [[-3.0, -3.0]]
    with pytest.raises(ValueError, match="unknown loss_type"):
        compute_policy_gradient_loss(lp, "ppo")


def _handout_example(norm):
    lp = torch.zeros(2, 7, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1] * 7])
    grpo_microbatch_train_step(
        lp,
        mask,
        1,
        "no_baseline",
        raw_rewards=torch.full((2, 1), -2.0),
        length_normalization=norm,
        normalize_constant=7,
    )
    return lp.grad


def test_length_normalizations_handout_worked_example():
    g = _handout_example("masked_mean")
    assert g[0, :4].tolist() == pytest.approx([0.25] * 4) and g[0, 4:].tolist() == [0, 0, 0]
    assert g[1].tolist() == pytest.approx([1 / 7] * 7, abs=1e-4)
    g = _handout_example("masked_normalize")
    assert g[0, :4].tolist() == pytest.approx([1 / 7] * 4, abs=1e-4) and g[1].tolist() == pytest.approx(
        [1 / 7] * 7, abs=1e-4
    )
    g = _handout_example("token_mean")  # 11 tokens in all: 2/11 each
    assert g[0, :4].tolist() == pytest.approx([2 / 11] * 4) and g[1].tolist() == pytest.approx([2 / 11] * 7)


def test_grpo_step_old_log_probs_and_advantages_get_no_grad():
    lp = torch.zeros(1, 3, requires_grad=True)
    old = torch.zeros(1, 3, requires_grad=True)
    adv = torch.ones(1, 1, requires_grad=True)
    _, meta = grpo_microbatch_train_step(
        lp, torch.ones(1, 3), 2, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=0.2
    )
    assert old.grad is None and adv.grad is None and lp.grad is not None
    assert float(meta["clip_fraction"]) == 0.0


def test_response_log_probs_match_log_softmax(tiny):
    model, _ = tiny
    ids = torch.randint(0, 100, (2, 6))
    labels = torch.randint(0, 100, (2, 6))
    out = get_response_log_probs(model, ids, labels, return_token_entropy=True)
    ref = torch.log_softmax(model(ids).logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(out["log_probs"], ref, atol=1e-5)
    assert out["token_entropy"].shape == (2, 6)


def test_sft_loss_ignores_prompt_logits_and_prompt_positions_get_zero_grad(tiny):
    model, tok = tiny
    batch = tokenize_prompt_and_output(["Compute 2 + 3."], [" 2 + 3 = 5. </think> <answer>5</answer>"], tok)
    embeds = model.get_input_embeddings()(batch["input_ids"]).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeds).logits
    from a5core.model.logprobs import label_log_probs

    lp = label_log_probs(logits, batch["labels"])
    lp.retain_grad()
    sft_microbatch_train_step(lp, batch["response_mask"], 1)
    assert (lp.grad[~batch["response_mask"]] == 0).all()
    assert (lp.grad[batch["response_mask"]] != 0).all()
    # changing a prompt-position label's log-prob cannot change the loss
    lp2 = lp.detach().clone()
    lp2[~batch["response_mask"]] -= 5.0
    l1 = -(lp.detach() * batch["response_mask"]).sum()
    l2 = -(lp2 * batch["response_mask"]).sum()
    assert float(l1) == float(l2)
