"""How a step's work is cut never changes the update (a5core/model/microbatch.py): the handout's split, token-budget
micro-batches, the chunked LM head and gradient checkpointing against the padded, unchunked, one-micro-batch
reference, for every policy-gradient loss and length normalization (clipping on), and for SFT's two normalizations."""

import copy
import itertools

import pytest
import torch

from a5core.base.records import RolloutBatch
from a5core.model import microbatch
from a5core.model.compute import Compute
from a5core.model.logprobs import chunkable, get_response_log_probs
from a5core.model.microbatch import Cut
from a5core.model.tokenization import tokenize_ids
from a5core.rl.grpo import GRPOConfig, optimizer_step
from a5core.rl.losses import LENGTH_NORMALIZERS, PG_LOSSES
from a5core.rl.sft import SFTConfig
from a5core.rl.sft import optimizer_step as sft_optimizer_step


def test_split_by_count_keeps_the_order_and_by_budget_packs_longest_first():
    assert microbatch.split([5, 3, 9, 2], 2) == [[0, 1], [2, 3]]
    assert microbatch.split([5, 3, 9, 2], 3) == [[0, 1, 2], [3]]
    # longest first: 9 alone (2 x 9 > 10), then 5 + 3 (2 x 5 = 10), then 2
    assert microbatch.split([5, 3, 9, 2], 0, budget=10) == [[2], [0, 1], [3]]
    assert microbatch.split([4, 4, 4, 4], 0, budget=16) == [[0, 1, 2, 3]]
    assert microbatch.split([7], 0, budget=7) == [[0]]  # a micro-batch of one that fills the budget exactly
    # packed, a micro-batch costs its real tokens: 9 alone (9 + 5 > 10), then 5 + 3 + 2
    assert microbatch.split([5, 3, 9, 2], 0, budget=10, packed=True) == [[2], [0, 1, 3]]


def test_one_prompt_per_micro_batch_takes_prompts_longest_first_and_never_mixes_them():
    # prompts 0 (lengths 5, 3), 1 (9, 2) and 2 (4): prompt 1 first (its 9 is the longest), then 0, then 2
    assert microbatch.split([5, 3, 9, 2, 4], 0, budget=20, prompts=[0, 0, 1, 1, 2]) == [[2, 3], [0, 1], [4]]
    # the budget still splits one prompt's samples: 3 x 5 > 12
    assert microbatch.split([5, 5, 5, 1], 0, budget=12, prompts=[7, 7, 7, 7]) == [[0, 1], [2, 3]]
    # packed rows share no prompt, so the prompts are ignored; without a budget, the handout's split
    assert microbatch.split([5, 3, 9, 2], 0, budget=10, packed=True, prompts=[0, 1, 0, 1]) == [[2], [0, 1, 3]]
    assert microbatch.split([5, 3, 9, 2], 2, prompts=[0, 1, 0, 1]) == [[0, 1], [2, 3]]
    cut = microbatch.Cut(micro_batch_tokens=20, group_prompts=True)
    assert microbatch.micro_batches([5, 3, 9, 2, 4], 0, cut, [[1, 2], [1, 2], [3], [3], [1]]) == [[2, 3], [0, 1], [4]]


def test_prompt_groups_and_packing_together_are_refused_before_any_work():
    from a5core.base.errors import ProjectError
    from a5core.config.sections import ModelConfig, from_dict

    assert from_dict(ModelConfig, {"group_prompts": True, "pack_sequences": False}, "model").group_prompts
    with pytest.raises((ValueError, ProjectError), match="packed rows share none"):
        from_dict(ModelConfig, {"group_prompts": True, "pack_sequences": True}, "model")


def test_a_budget_smaller_than_the_longest_sequence_is_a_clear_error():
    with pytest.raises(microbatch.BudgetError, match="sequence of 9 tokens does not fit model.micro_batch_tokens=8"):
        microbatch.split([5, 9, 2], 0, budget=8)


def test_share_is_the_handouts_k_for_an_even_split():
    assert microbatch.share(16, 8) == 2.0 and microbatch.share(7, 7) == 1.0
    assert microbatch.share(10, 4) * 4 / 10 == 1.0


def test_model_section_takes_auto_or_a_token_count():
    from a5core.config.sections import ConfigError, ModelConfig, from_dict

    assert from_dict(ModelConfig, {"micro_batch_tokens": 4096}).micro_batch_tokens == 4096
    assert from_dict(ModelConfig, {}).micro_batch_tokens == "auto"
    with pytest.raises(ConfigError, match="micro_batch_tokens"):
        from_dict(ModelConfig, {"micro_batch_tokens": "big"})
    with pytest.raises(ConfigError, match="logits_chunk"):
        from_dict(ModelConfig, {"logits_chunk": -1})


# ---- the chunked LM head ----


def _ids(tok, texts):
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    return tokenize_ids([r[:3] for r in rows], [r[3:] for r in rows], 0)


TEXTS = ["Compute 12 + 30 = 42.", "Compute 1 + 1 = 2, then 2 * 5 = 10, so 10.", "Compute 7."]


@pytest.mark.parametrize("chunk,share_prefix", [(1, False), (3, True), (5, False), (1000, True)])
def test_chunked_log_probs_and_entropy_equal_the_full_logits_path(tiny, chunk, share_prefix):
    model, tok = tiny
    assert chunkable(model)
    t = _ids(tok, TEXTS)
    grads = []
    outs = []
    for c in (0, chunk):
        m = copy.deepcopy(model)
        out = get_response_log_probs(
            m, t["input_ids"], t["labels"], True, share_prefix=share_prefix, entropy_grad=True, cut=Cut(logits_chunk=c)
        )
        (out["log_probs"].sum() + 0.3 * out["token_entropy"].sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters()]))
        outs.append(out)
    assert torch.allclose(outs[0]["log_probs"], outs[1]["log_probs"], atol=1e-5, rtol=0)
    assert torch.allclose(outs[0]["token_entropy"], outs[1]["token_entropy"], atol=1e-5, rtol=0)
    assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=1e-4)


def test_chunked_entropy_without_grad_is_detached(tiny):
    model, tok = tiny
    t = _ids(tok, TEXTS)
    out = get_response_log_probs(copy.deepcopy(model), t["input_ids"], t["labels"], True, cut=Cut(logits_chunk=4))
    assert out["log_probs"].requires_grad and not out["token_entropy"].requires_grad


# ---- GRPO: every loss x normalization, every way of cutting the step ----


def _rollouts(tok, n=8):
    """n rollouts of very different lengths (1 to ~40 response tokens), nonzero advantages and off-policy old
    log-probs that put some ratios outside the clip range; four samples per question, as GRPO's groups."""
    g = torch.Generator().manual_seed(0)
    questions = [f"Q{q}: what is {q} * {q + 3}?" for q in (i // 4 for i in range(n))]
    prompts = [tok(q, add_special_tokens=False)["input_ids"] for q in questions]
    vocab = tok.vocab_size
    outputs = [torch.randint(5, vocab, (1 + (i * 13) % 40,), generator=g).tolist() for i in range(n)]
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0][:n])
    adv = torch.randn(n, generator=g)
    batch = RolloutBatch(prompts, outputs, rewards, adv, 0)
    batch.old_log_probs = [-3.0 + 0.3 * torch.randn(len(p) + len(o) - 1, generator=g) for p, o in zip(prompts, outputs)]
    return batch


def _compute(**cut) -> Compute:
    """A stage's settings with the cut `cut` (Cut's fields), float32, torch's AdamW."""
    return Compute(cut=Cut(**cut))


def _grpo_update(model, cfg, batch, **cut):
    compute = _compute(**cut)
    m = copy.deepcopy(model).train()
    microbatch.prepare(m, compute.cut)
    before = [p.detach().clone() for p in m.parameters()]
    opt = torch.optim.SGD(m.parameters(), lr=1.0)  # the update is the clipped gradient itself
    row = optimizer_step(m, opt, cfg, list(range(len(batch))), batch, torch.device("cpu"), compute)
    delta = torch.cat([(p.detach() - b).flatten() for p, b in zip(m.parameters(), before)])
    return delta, row


CUTS = {
    "handout split of 4": (4, {}),
    "micro-batch of one": (8, {}),
    "token budget": (1, {"micro_batch_tokens": 96}),
    "chunked logits": (1, {"logits_chunk": 7}),
    "checkpointing": (2, {"gradient_checkpointing": True}),
    "packed": (2, {"pack_sequences": True}),
    "packed to a budget": (1, {"pack_sequences": True, "micro_batch_tokens": 130}),
    "one prompt per micro-batch": (1, {"micro_batch_tokens": 96, "group_prompts": True}),
    "all at once": (4, {"micro_batch_tokens": 80, "logits_chunk": 5, "gradient_checkpointing": True}),
    "all packed": (
        4,
        {"micro_batch_tokens": 150, "logits_chunk": 5, "gradient_checkpointing": True, "pack_sequences": True},
    ),
}


@pytest.mark.parametrize("loss_type,norm", list(itertools.product(sorted(PG_LOSSES), sorted(LENGTH_NORMALIZERS))))
def test_grpo_update_does_not_depend_on_how_the_step_is_cut(tiny, loss_type, norm):
    model, tok = tiny
    batch = _rollouts(tok)
    base = dict(
        loss_type=loss_type,
        length_normalization=norm,
        normalize_constant=40.0,
        rollout_batch_size=8,
        group_size=4,
        train_batch_size=8,
        max_grad_norm=1e-4,  # small enough that clipping scales every update below
    )
    ref_delta, ref_row = _grpo_update(model, GRPOConfig(**base, gradient_accumulation_steps=1), batch)
    assert ref_row["train/grad_norm"] > 1e-4  # clipping is on
    for name, (k, cut) in CUTS.items():
        delta, row = _grpo_update(model, GRPOConfig(**base, gradient_accumulation_steps=k), batch, **cut)
        assert row["train/grad_norm"] == pytest.approx(ref_row["train/grad_norm"], rel=1e-4), name
        assert row["train/loss"] == pytest.approx(ref_row["train/loss"], rel=1e-4, abs=1e-7), name
        # atol: the update is read back as weights after - before, so it carries the float32 rounding of weights
        # near 1 (half an ulp, 6e-8, measured); the other elements differ by at most 2e-9
        assert torch.allclose(delta, ref_delta, atol=1e-7, rtol=1e-4), name


def test_token_mean_divides_by_the_steps_tokens_not_each_micro_batchs(tiny):
    """The bug of trl#3231: with each micro-batch's own token count, a token of a short micro-batch weighs more."""
    model, tok = tiny
    batch = _rollouts(tok)
    cfg = dict(length_normalization="token_mean", rollout_batch_size=8, group_size=4, train_batch_size=8)
    one, _ = _grpo_update(model, GRPOConfig(**cfg, gradient_accumulation_steps=1, max_grad_norm=1e9), batch)
    four, _ = _grpo_update(model, GRPOConfig(**cfg, gradient_accumulation_steps=4, max_grad_norm=1e9), batch)
    # 1e-7 absolute on updates up to ~0.06: float32 summation order differs by ISA (6e-8 measured on AVX512-BF16);
    # dividing by each micro-batch's token count moves them by ~1e-3
    assert torch.allclose(one, four, atol=1e-7, rtol=1e-4)


def test_grpo_refuses_a_budget_below_the_longest_rollout(tiny):
    model, tok = tiny
    batch = _rollouts(tok)
    cfg = GRPOConfig(rollout_batch_size=8, group_size=4, train_batch_size=8, gradient_accumulation_steps=1)
    with pytest.raises(microbatch.BudgetError, match="does not fit"):
        _grpo_update(model, cfg, batch, micro_batch_tokens=20)


def test_the_padded_fraction_is_logged_and_a_budget_lowers_it_and_packing_removes_it(tiny):
    model, tok = tiny
    batch = _rollouts(tok)
    cfg = GRPOConfig(rollout_batch_size=8, group_size=4, train_batch_size=8, gradient_accumulation_steps=2)
    _, handout = _grpo_update(model, cfg, batch)
    _, budget = _grpo_update(model, cfg, batch, micro_batch_tokens=120)
    _, packed = _grpo_update(model, cfg, batch, pack_sequences=True)
    assert packed["perf/padding_fraction"] == 0 < budget["perf/padding_fraction"] < handout["perf/padding_fraction"] < 1


def test_packed_rows_attend_only_within_their_own_sequence(tiny):
    """One packed row gives each sequence the log-probs it has alone (transformers' block-causal packed mask)."""
    model, tok = tiny
    t = _ids(tok, TEXTS)
    lengths = [int((t["labels"][i] != 0).sum()) for i in range(3)]  # no 0 ids in TEXTS: 0 is the padding
    packed = get_response_log_probs(
        model, t["input_ids"], t["labels"], True, lengths=lengths, cut=Cut(pack_sequences=True)
    )
    for i, n in enumerate(lengths):
        alone = get_response_log_probs(model, t["input_ids"][i : i + 1, :n], t["labels"][i : i + 1, :n], True)
        assert torch.allclose(packed["log_probs"][i, :n], alone["log_probs"][0], atol=1e-5)
        assert torch.allclose(packed["token_entropy"][i, :n], alone["token_entropy"][0], atol=1e-5)
        assert (packed["log_probs"][i, n:] == 0).all()


# ---- SFT ----

SFT_ROWS = [
    ("Compute 1 + 1.", " 2"),
    ("Compute 12 + 30, and show each step of the work.", " 12 + 30 = 42. </think> <answer>42</answer>"),
    ("Q", " 3 * 3 = 9, 9 + 1 = 10, 10 * 2 = 20, so the answer is 20. </think> <answer>20</answer>"),
    ("Compute 5 - 2.", " 3. </think> <answer>3</answer>"),
    ("Compute 100 / 4 and explain.", " 25"),
    ("Compute 12 + 30, and show each step of the work.", " 42. </think> <answer>42</answer>"),  # as EI keeps them
]


def _sft_update(model, tok, cfg, **cut):
    """One SFT optimizer step (sft.optimizer_step: clip, then SGD at lr 1, so the update is the clipped gradient)."""
    compute = _compute(**cut)
    m = copy.deepcopy(model).train()
    microbatch.prepare(m, compute.cut)
    ex = [
        (tok(p, add_special_tokens=False)["input_ids"], tok(r, add_special_tokens=False)["input_ids"])
        for p, r in SFT_ROWS
    ]
    before = [p.detach().clone() for p in m.parameters()]
    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    row = sft_optimizer_step(m, opt, sched, ex, cfg, 0, torch.device("cpu"), compute)
    return torch.cat([(p.detach() - b).flatten() for p, b in zip(m.parameters(), before)]), row


SFT_CUTS = [
    (2, {}),
    (1, {}),
    (6, {"micro_batch_tokens": 60}),
    (6, {"micro_batch_tokens": 90, "group_prompts": True}),
    (3, {"logits_chunk": 4}),
    (2, {"pack_sequences": True}),
    (6, {"pack_sequences": True, "micro_batch_tokens": 70}),
    (6, {"gradient_checkpointing": True, "micro_batch_tokens": 90, "logits_chunk": 9}),
]


@pytest.mark.parametrize("norm", ["token_mean", "per_example"])
def test_sft_update_does_not_depend_on_how_the_step_is_cut(tiny, norm):
    model, tok = tiny
    base = dict(batch_size=6, loss_normalization=norm, max_grad_norm=1e-4)
    ref, ref_row = _sft_update(model, tok, SFTConfig(**base, micro_batch_size=6))
    assert ref_row["train/grad_norm"] > 1e-4  # clipping is on
    for micro, cut in SFT_CUTS:
        delta, row = _sft_update(model, tok, SFTConfig(**base, micro_batch_size=micro), **cut)
        assert row["train/loss"] == pytest.approx(ref_row["train/loss"], rel=1e-5), (micro, cut)
        assert row["train/grad_norm"] == pytest.approx(ref_row["train/grad_norm"], rel=1e-4), (micro, cut)
        assert torch.allclose(delta, ref, atol=1e-7, rtol=1e-4), (micro, cut)  # atol: as in the GRPO grid


def test_sft_refuses_a_budget_below_its_longest_example(tiny):
    model, tok = tiny
    with pytest.raises(microbatch.BudgetError, match="does not fit"):
        _sft_update(model, tok, SFTConfig(batch_size=6, micro_batch_size=6), micro_batch_tokens=10)


OPTIONS = dict(loss_type="grpo_clip", cliprange_high=0.28, length_normalization="token_mean")
ESTIMATORS = dict(loss_type="gspo", clip_ratio_c=3.0, kl_estimator="k2", length_normalization="masked_mean")


@pytest.mark.parametrize("variant", [OPTIONS, ESTIMATORS], ids=["options", "gspo_dual_clip_k2"])
def test_the_rl_options_compose_with_every_way_of_cutting_the_step(tiny, variant):
    """Clip-higher (or GSPO with dual-clip), overlong masking, the entropy bonus (its graph through the chunked head),
    KL to a reference and truncated importance sampling, all on: the update does not depend on the split, packing or
    chunking either."""
    model, tok = tiny
    batch = _rollouts(tok)
    g = torch.Generator().manual_seed(1)
    lengths = [len(p) + len(o) - 1 for p, o in zip(batch.prompt_ids, batch.output_ids)]
    batch.ref_log_probs = [-3.0 + 0.3 * torch.randn(n, generator=g) for n in lengths]
    batch.rollout_log_probs = [-3.0 + 0.3 * torch.randn(len(o), generator=g) for o in batch.output_ids]
    batch.keep = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    base = dict(
        **variant,
        mask_truncated=True,
        entropy_coef=0.01,
        kl_coef=0.1,
        tis_cap=2.0,
        rollout_batch_size=8,
        group_size=4,
        train_batch_size=8,
        max_grad_norm=1e-4,
    )
    ref_delta, ref_row = _grpo_update(model, GRPOConfig(**base, gradient_accumulation_steps=1), batch)
    for name in ("handout split of 4", "token budget", "packed to a budget", "all packed"):
        k, cut = CUTS[name]
        delta, row = _grpo_update(model, GRPOConfig(**base, gradient_accumulation_steps=k), batch, **cut)
        assert row["train/kl"] == pytest.approx(ref_row["train/kl"], rel=1e-5), name
        assert row["train/tis_capped_frac"] == pytest.approx(ref_row["train/tis_capped_frac"]), name
        assert torch.allclose(delta, ref_delta, atol=1e-7, rtol=1e-4), name


def test_token_level_advantages_give_the_same_update_however_the_step_is_cut(tiny):
    """REINFORCE++ with KL in the reward weighs each token by its own advantage (`RolloutBatch.token_advantages`, laid
    out per micro-batch row): the update does not depend on the split, the token budget, packing or chunking, and
    differs from the one with each rollout's mean advantage."""
    model, tok = tiny
    batch = _rollouts(tok)
    g = torch.Generator().manual_seed(2)
    batch.token_advantages = [torch.randn(len(o), generator=g) for o in batch.output_ids]
    base = dict(rollout_batch_size=8, group_size=4, train_batch_size=8, max_grad_norm=1e-4)
    ref_delta, _ = _grpo_update(model, GRPOConfig(**base, gradient_accumulation_steps=1), batch)
    for name in ("handout split of 4", "micro-batch of one", "token budget", "chunked logits", "packed"):
        k, cut = CUTS[name]
        delta, _ = _grpo_update(model, GRPOConfig(**base, gradient_accumulation_steps=k), batch, **cut)
        assert torch.allclose(delta, ref_delta, atol=1e-7, rtol=1e-4), name
    batch.advantages = torch.stack([a.mean() for a in batch.token_advantages])
    batch.token_advantages = None
    mean_delta, _ = _grpo_update(model, GRPOConfig(**base, gradient_accumulation_steps=1), batch)
    assert not torch.allclose(mean_delta, ref_delta, atol=1e-7, rtol=1e-4)
