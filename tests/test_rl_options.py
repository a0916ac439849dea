"""The RL options of a5core/rl/rl_options.py: each loss term on hand-computed tensors, the config rules, and GRPO runs
(and a kill-and-resume) with the options on, on a tiny model with the stub backend of tests/support/loops.py."""

import copy
import math

import pytest
import torch
import yaml

import a5core.rl.grpo as grpo_mod
from a5core.base.records import RolloutBatch
from a5core.config.prompts import REWARD_FNS
from a5core.config.sections import ConfigError, SamplingConfig, from_dict
from a5core.generation import HFBackend
from a5core.generation.base import Completion
from a5core.model.logprobs import compute_entropy, get_response_log_probs
from a5core.model.tokenization import tokenize_ids
from a5core.rl.ei import EIConfig
from a5core.rl.grpo import GRPOConfig
from a5core.rl.losses import compute_grpo_clip_loss, grpo_microbatch_train_step
from a5core.rl.rl_options import (
    _rollout_rows,
    kl_penalty,
    loss_terms,
    overlong_penalty,
    tis_weights,
    truncation_keep,
    truncation_rate,
)
from tests.support.loops import StubBackend, grpo_cfg, run_grpo
from tests.support.plans import QWEN, full_params
from tests.support.resume import checkpointer, straight_killed_resumed

RATIOS = [0.5, 1.0, 1.25, 1.5]


def _clip(advantage: float, cliprange):
    lp = torch.log(torch.tensor([RATIOS])).requires_grad_()  # (1, 4), old log-probs 0: ratio = exp(lp)
    loss, meta = compute_grpo_clip_loss(torch.tensor([[advantage]]), lp, torch.zeros(1, 4), cliprange)
    loss.sum().backward()
    return loss.detach()[0].tolist(), meta["clipped"][0].tolist(), lp.grad[0].tolist()


def test_clip_higher_clips_each_side_at_its_own_epsilon():
    loss, clipped, grad = _clip(1.0, (0.2, 0.28))  # A > 0: only the upper bound 1 + 0.28 binds
    assert loss == pytest.approx([-0.5, -1.0, -1.25, -1.28], abs=1e-6)
    assert clipped == [False, False, False, True]
    assert grad == pytest.approx([-0.5, -1.0, -1.25, 0.0], abs=1e-6)  # d(-r)/dlp = -r; zero where clipped
    loss, clipped, grad = _clip(-1.0, (0.2, 0.28))  # A < 0: only the lower bound 1 - 0.2 binds
    assert loss == pytest.approx([0.8, 1.0, 1.25, 1.5], abs=1e-6)
    assert clipped == [True, False, False, False]
    assert grad == pytest.approx([0.0, 1.0, 1.25, 1.5], abs=1e-6)
    loss, _, _ = _clip(1.0, 0.2)  # the handout's symmetric clip, for contrast
    assert loss == pytest.approx([-0.5, -1.0, -1.2, -1.2], abs=1e-6)


def test_clip_bounds_is_the_handouts_float_unless_cliprange_high_is_set():
    assert GRPOConfig().clip_bounds == 0.2 and isinstance(GRPOConfig().clip_bounds, float)
    assert GRPOConfig(cliprange_high=0.28).clip_bounds == (0.2, 0.28)


@pytest.mark.parametrize(
    "estimator, value, grad",
    [
        ("k1", math.log(2), 1.0),  # log(pi/ref), d/dlp = 1
        ("k2", 0.5 * math.log(2) ** 2, math.log(2)),  # (log r)^2 / 2, d/dlp = log r
        ("k3", 0.5 - 1 + math.log(2), 0.5),  # ref/pi - 1 + log(pi/ref), d/dlp = 1 - ref/pi
        ("k3+", 0.5 - 1 + math.log(2), math.log(2)),  # k3's value, k2's gradient (verl's straight-through k3+)
    ],
)
def test_kl_estimators_and_their_gradients(estimator, value, grad):
    lp = torch.log(torch.tensor([[0.5]])).requires_grad_()  # pi = 0.5
    ref = torch.log(torch.tensor([[0.25]])).requires_grad_()  # ref = 0.25: log(pi/ref) = log 2
    kl = kl_penalty(lp, ref, estimator)
    kl.sum().backward()
    assert float(kl.detach()) == pytest.approx(value, abs=1e-6)
    assert float(lp.grad) == pytest.approx(grad, abs=1e-6)
    assert ref.grad is None  # the reference is a constant


def test_kl_estimators_are_zero_on_policy():
    lp = torch.tensor([[-1.0, -2.0]])
    for estimator in ("k1", "k2", "k3", "k3+"):
        assert torch.equal(kl_penalty(lp, lp.clone(), estimator), torch.zeros(1, 2))


def test_entropy_bonus_gradient_from_the_forward_pass():
    logits = torch.tensor([[[0.0, math.log(3.0)]]], requires_grad=True)  # p = (1/4, 3/4)
    entropy = compute_entropy(logits)  # (1, 1)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert float(entropy.detach()) == pytest.approx(h, abs=1e-6)
    cfg = GRPOConfig(entropy_coef=0.1)
    out = {"log_probs": torch.zeros(1, 1), "token_entropy": entropy}
    terms, sums = loss_terms(cfg, out, None, None, [0], 1)
    assert set(terms) == {"penalty"} and not sums
    terms["penalty"].sum().backward()
    dh = [-p * (math.log(p) + h) for p in (0.25, 0.75)]  # dH/dz_i = -p_i (log p_i + H)
    assert logits.grad[0, 0].tolist() == pytest.approx([-0.1 * d for d in dh], abs=1e-6)  # the bonus raises H


def _train_step(**kw):
    lp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    loss, _ = grpo_microbatch_train_step(
        lp, mask, 1, "no_baseline", raw_rewards=torch.zeros(2, 1), length_normalization="masked_mean", **kw
    )
    return float(loss)


def test_penalty_and_sample_weight_enter_the_loss_before_normalization():
    penalty = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])  # masked-out positions must not count
    assert _train_step() == 0.0
    assert _train_step(penalty=penalty) == pytest.approx((2.0 + 4.0) / 2)  # per-sequence means 2 and 4
    keep = torch.tensor([[1.0], [0.0]])  # the second rollout was truncated
    assert _train_step(penalty=penalty, sample_weight=keep) == pytest.approx((2.0 + 0.0) / 2)


def test_overlong_penalty_and_truncation_mask():
    lengths = torch.tensor([5, 6, 8, 10])
    assert overlong_penalty(lengths, 10, 4, 1.0).tolist() == pytest.approx([0.0, 0.0, -0.5, -1.0])
    assert overlong_penalty(lengths, 10, 4, 0.5).tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5])
    assert truncation_keep(["stop", "length", "stop"]).tolist() == [1.0, 0.0, 1.0]
    assert truncation_rate(["stop", "length", "length", "stop"]) == 0.5


def test_defaults_add_nothing_to_the_loss():
    """Every option off: the train step gets exactly the handout's arguments (no penalty, no weight)."""
    batch = RolloutBatch([[1]], [[2]], torch.zeros(1), torch.zeros(1), 0)
    out = {"log_probs": torch.zeros(1, 1), "token_entropy": torch.zeros(1, 1)}
    assert loss_terms(GRPOConfig(), out, None, batch, [0], 1) == ({}, {})


def test_option_config_rules():
    with pytest.raises(ConfigError, match="cliprange_high"):
        from_dict(GRPOConfig, {"cliprange_high": -0.1}, "grpo")
    with pytest.raises(ConfigError, match="cliprange_high needs a clipped loss"):  # would be silently ignored
        from_dict(GRPOConfig, {"cliprange_high": 0.28}, "grpo")
    with pytest.raises(ConfigError, match="tis_cap"):
        from_dict(GRPOConfig, {"tis_cap": 0.5}, "grpo")
    with pytest.raises(ConfigError, match="k4"):
        from_dict(GRPOConfig, {"kl_estimator": "k4"}, "grpo")
    with pytest.raises(ConfigError, match="overlong_buffer"):
        from_dict(GRPOConfig, {"overlong_buffer": 2048, "max_tokens": 1024}, "grpo")
    with pytest.raises(ConfigError, match="entropy_coef"):
        from_dict(GRPOConfig, {"entropy_coef": -1.0}, "grpo")
    ok = {"cliprange_high": 0.28, "loss_type": "grpo_clip", "kl_coef": 0.04, "kl_estimator": "k2"}
    cfg = from_dict(GRPOConfig, ok, "grpo")
    assert (cfg.cliprange_high, cfg.kl_coef, cfg.kl_estimator) == (0.28, 0.04, "k2")


class TruncatingBackend(StubBackend):
    """The stub backend, with every ' bad' completion cut at max_tokens."""

    def _completion(self, text):
        c = super()._completion(text)
        return type(c)(c.text, c.token_ids, "length" if "bad" in text else "stop")


def _trunc(tok):
    return TruncatingBackend(tok, [" good", " bad"])


ALL_ON = dict(
    loss_type="grpo_clip",
    train_batch_size=4,
    cliprange_high=0.28,
    mask_truncated=True,
    overlong_buffer=4,
    entropy_coef=0.01,
    kl_coef=0.1,
)
# the estimators of issue 44 together: GSPO with dual-clip, RLOO's advantages, KL as a reward penalty
NEW_ON = dict(
    loss_type="gspo", train_batch_size=4, clip_ratio_c=3.0, advantage_estimator="rloo", kl_coef=0.1, kl_in_reward=True
)


def test_grpo_with_every_option_on_trains_and_logs(tiny, tmp_path):
    model, tok = tiny
    _, history = run_grpo(copy.deepcopy(model), tok, tmp_path, grpo_cfg(**ALL_ON), backend=_trunc(tok))
    train = history.rows["train"]
    assert len(train) == 4 and all(r["rollout/truncation_rate"] == 0.5 for r in train)
    assert train[0]["train/kl"] == pytest.approx(0.0, abs=1e-6)  # the first step is the reference itself
    assert train[-1]["train/kl"] > 0.0  # and the policy moves away from it
    assert all(math.isfinite(r["train/loss"]) for r in train)


def test_defaults_log_the_truncation_rate_and_no_option_metrics(tiny, tmp_path):
    model, tok = tiny
    _, history = run_grpo(copy.deepcopy(model), tok, tmp_path, grpo_cfg(n_grpo_steps=1))
    row = history.rows["train"][0]
    assert row["rollout/truncation_rate"] == 0.0 and "train/kl" not in row


@pytest.mark.parametrize("options", [ALL_ON, NEW_ON], ids=["options", "estimators"])
def test_grpo_resumes_bit_identically_with_the_options_on(tiny, tmp_path, options):
    """The reference is the run's start policy, also after a resume (it is copied before the restore)."""
    model, tok = tiny
    cfg = grpo_cfg(n_grpo_steps=3, **options)

    def run(name, kill_at):
        policy, ckpt = copy.deepcopy(model), checkpointer(tmp_path, name)
        return policy, run_grpo(policy, tok, tmp_path / name, cfg, ckpt=ckpt, die_at=kill_at, backend=_trunc(tok))[1]

    out = straight_killed_resumed(run, 3)
    (straight, history_straight), (resumed, history) = out.straight, out.resumed
    kl = "rollout/kl" if cfg.kl_in_reward else "train/kl"
    assert [r[kl] for r in history.rows["train"]] == [r[kl] for r in history_straight.rows["train"]]
    for p, q in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(p, q)


def test_tis_weights_are_the_capped_ratio_and_constant():
    train = torch.log(torch.tensor([[0.5, 0.5, 0.5]])).requires_grad_()
    rollout = torch.log(torch.tensor([[0.5, 0.25, 0.1]]))  # ratios 1, 2, 5
    weight, capped = tis_weights(train, rollout, 2.0)
    assert weight.tolist()[0] == pytest.approx([1.0, 2.0, 2.0], abs=1e-6) and not weight.requires_grad
    assert capped.tolist() == [[False, False, True]]


def test_engine_log_probs_sit_at_the_response_positions():
    batch = RolloutBatch([[1, 2, 3]], [[4, 5]], torch.zeros(1), torch.zeros(1), 0)
    batch.rollout_log_probs = [torch.tensor([-1.0, -2.0])]
    train = torch.full((1, 4), -0.5)  # labels 2 3 4 5: the engine's ids 4 and 5 are labels 2 and 3
    assert _rollout_rows(batch, [0], train).tolist() == [[-0.5, -0.5, -1.0, -2.0]]


def test_pg_weight_scales_only_the_policy_gradient_term():
    lp = torch.full((2, 3), -1.0, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    weight = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    loss, _ = grpo_microbatch_train_step(lp, mask, 1, "no_baseline", raw_rewards=torch.ones(2, 1), pg_weight=weight)
    assert float(loss) == pytest.approx((2.0 + 4.0) / 2)  # -r * lp * w = w; per-sequence means 2 and 4
    assert lp.grad[0].tolist() == pytest.approx([-1 / 6, -2 / 6, -3 / 6])  # -r * w / (3 tokens * 2 sequences)
    assert lp.grad[1].tolist() == pytest.approx([-4 / 2, 0.0, 0.0])


def test_hf_backend_returns_the_log_probs_training_computes(tiny):
    model, tok = tiny
    be = HFBackend(model, tok, batch_size=4)
    sampling = SamplingConfig(temperature=1.0, max_tokens=6, min_tokens=2, stop=(), n=2, seed=3)
    out = be.generate(["Compute 1 + 2."], sampling, progress=False)[0]
    prompt = tok("Compute 1 + 2.", add_special_tokens=False)["input_ids"]
    b = tokenize_ids([prompt] * 2, [list(c.token_ids) for c in out], 0)
    with torch.no_grad():
        lp = get_response_log_probs(model, b["input_ids"], b["labels"])["log_probs"]  # (2, T)
    for j, c in enumerate(out):
        ours = lp[j][b["response_mask"][j]].tolist()
        assert len(c.token_logprobs) == len(c.token_ids) and c.token_logprobs == pytest.approx(ours, abs=1e-4)


class EngineLogProbBackend(StubBackend):
    """The stub backend, reporting a log-prob of -1 for every sampled token (a large mismatch with the tiny model)."""

    def _completion(self, text):
        c = super()._completion(text)
        return Completion(c.text, c.token_ids, c.finish_reason, None, (-1.0,) * len(c.token_ids))


def test_grpo_with_truncated_importance_sampling(tiny, tmp_path):
    model, tok = tiny
    cfg = grpo_cfg(n_grpo_steps=1, tis_cap=2.0)
    _, history = run_grpo(
        copy.deepcopy(model), tok, tmp_path / "a", cfg, backend=EngineLogProbBackend(tok, [" good", " bad"])
    )
    row = history.rows["train"][0]
    assert row["train/tis_logprob_gap"] > 0.1 and 0.0 <= row["train/tis_capped_frac"] <= 1.0
    assert math.isfinite(row["train/loss"])
    with pytest.raises(ValueError, match="tis_cap"):  # a backend that returns no log-probs cannot be corrected
        run_grpo(copy.deepcopy(model), tok, tmp_path / "b", cfg)


class PerQuestionBackend(StubBackend):
    """Questions whose number is in `mixed` get ' good' / ' bad' alternately (a group with mixed rewards); the
    others ' bad' only (a group whose rewards are all equal)."""

    def __init__(self, tok, mixed):
        super().__init__(tok, [" good", " bad"])
        self.mixed = mixed

    def generate(self, prompts, sampling, progress=True):
        self.calls += 1
        texts = {True: [" good", " bad"], False: [" bad"]}
        out = []
        for p in prompts:
            options = texts[any(f"Compute {i} + {i}." in p for i in self.mixed)]
            out.append([self._completion(options[j % len(options)]) for j in range(sampling.n)])
        return out


def _ds(tiny, tmp_path, mixed, monkeypatch, **kw):
    model, tok = tiny
    batches = []
    real = grpo_mod.rollout_batch
    monkeypatch.setattr(
        grpo_mod, "rollout_batch", lambda tok, samples, cfg: batches.append(samples) or real(tok, samples, cfg)
    )
    backend = PerQuestionBackend(tok, mixed)
    policy = copy.deepcopy(model)
    cfg = grpo_cfg(n_grpo_steps=1, dynamic_sampling=True, **kw)
    _, history = run_grpo(policy, tok, tmp_path, cfg, backend=backend)
    return history.rows["train"][0], batches[0], backend, policy


def _groups_mixed(samples, size=4):
    return [len({s.reward for s in samples[i : i + size]}) > 1 for i in range(0, len(samples), size)]


def test_dynamic_sampling_never_all_equal_generates_once_and_changes_nothing(tiny, tmp_path, monkeypatch):
    row, batch, backend, policy = _ds(tiny, tmp_path / "a", range(6), monkeypatch)
    assert backend.calls == 1 and _groups_mixed(batch) == [True, True]
    assert (
        row["rollout/groups_generated"],
        row["rollout/groups_dropped"],
        row["rollout/refill_rounds"],
        row["rollout/groups_filled"],
    ) == (2, 0, 0, 0)
    plain = copy.deepcopy(tiny[0])  # the same run without dynamic sampling: the same weights, bit for bit
    run_grpo(plain, tiny[1], tmp_path / "b", grpo_cfg(n_grpo_steps=1), backend=PerQuestionBackend(tiny[1], range(6)))
    assert all(torch.equal(p, q) for p, q in zip(plain.parameters(), policy.parameters()))


def test_dynamic_sampling_all_equal_refills_to_the_limit_then_fills(tiny, tmp_path, monkeypatch):
    row, batch, backend, _ = _ds(tiny, tmp_path, [], monkeypatch, max_refill_rounds=2)
    assert backend.calls == 3  # the step's round and two refills
    assert (
        row["rollout/groups_generated"],
        row["rollout/groups_dropped"],
        row["rollout/refill_rounds"],
        row["rollout/groups_filled"],
    ) == (6, 6, 2, 2)
    assert len(batch) == 8 and _groups_mixed(batch) == [False, False]  # filled with dropped groups: batch size kept


def test_dynamic_sampling_partly_all_equal_keeps_only_mixed_groups(tiny, tmp_path, monkeypatch):
    row, batch, backend, _ = _ds(tiny, tmp_path, [0, 1, 2], monkeypatch, max_refill_rounds=20)
    assert row["rollout/groups_filled"] == 0 and _groups_mixed(batch) == [True, True] and len(batch) == 8
    assert backend.calls == row["rollout/refill_rounds"] + 1
    assert row["rollout/groups_generated"] == 2 * backend.calls
    kept = row["rollout/groups_generated"] - row["rollout/groups_dropped"]
    assert kept >= 2 and row["rollout/groups_dropped"] >= 1  # this seed draws at least one all-equal group


def test_grpo_resumes_bit_identically_with_dynamic_sampling(tiny, tmp_path):
    model, tok = tiny
    cfg = grpo_cfg(n_grpo_steps=3, dynamic_sampling=True, max_refill_rounds=5)

    def run(name, kill_at):
        policy, ckpt, backend = copy.deepcopy(model), checkpointer(tmp_path, name), PerQuestionBackend(tok, [0, 1, 2])
        return policy, run_grpo(policy, tok, tmp_path / name, cfg, ckpt=ckpt, die_at=kill_at, backend=backend)[1]

    out = straight_killed_resumed(run, 2)
    (straight, history_straight), (resumed, history) = out.straight, out.resumed
    keys = ("rollout/groups_generated", "rollout/groups_dropped", "rollout/reward")
    assert [[r[k] for k in keys] for r in history.rows["train"]] == [
        [r[k] for k in keys] for r in history_straight.rows["train"]
    ]
    assert all(torch.equal(p, q) for p, q in zip(straight.parameters(), resumed.parameters()))


STRICT = "a5core.grader:r1_zero_strict_reward_fn"
QUESTION_ONLY = "a5core.grader:question_only_reward_fn"


@pytest.mark.parametrize("cls, section", [(GRPOConfig, "grpo"), (EIConfig, "ei")])
def test_each_training_stage_names_its_reward_checked_against_its_prompt(cls, section):
    assert cls().train_reward == REWARD_FNS["r1_zero"]  # default: the prompt's reward, the handout's behaviour
    assert from_dict(cls, {"prompt": "question_only"}, section).train_reward == QUESTION_ONLY
    assert from_dict(cls, {"reward_fn": STRICT}, section).train_reward == STRICT
    with pytest.raises(ConfigError, match="grades the 'question_only' prompt's format"):
        from_dict(cls, {"reward_fn": QUESTION_ONLY}, section)
    with pytest.raises(ConfigError, match="expected module:function"):
        from_dict(cls, {"reward_fn": "no_colon"}, section)
    with pytest.raises(ConfigError, match="cannot import"):
        from_dict(cls, {"reward_fn": "rewards.nowhere:fn"}, section)


def test_the_plan_counts_the_reference_and_the_entropy_graph(tmp_path):
    from a5core.run import plan

    params = yaml.safe_load(full_params(tmp_path).read_text())
    assert plan.rl_option_memory(params, QWEN, "bfloat16", 2, 1000) == {}  # options off: the plan is unchanged
    params["grpo_runs"] = {"kl": {"kl_coef": 0.04}, "bonus": {"entropy_coef": 0.01}, "async": {"max_staleness": 1}}
    extra = plan.rl_option_memory(params, QWEN, "bfloat16", 2, 1000)
    assert "hf backend's own weights (grpo.max_staleness)" not in extra  # full: vLLM's engine holds its own
    assert extra["reference policy (grpo.kl_coef)"] == pytest.approx(QWEN.parameters * 2 / 1024**3)
    params["generation"]["backend"] = "hf"
    hf = plan.rl_option_memory(params, QWEN, "bfloat16", 2, 1000)
    assert hf["hf backend's own weights (grpo.max_staleness)"] == pytest.approx(QWEN.parameters * 2 / 1024**3)
    # float32 weights generating in bf16 (generation.dtype auto, bf16 on CUDA): one bf16 copy, which is also the copy
    # asynchronous rollouts generate from; generation.dtype float32: the float32 copy max_staleness keeps
    copy = plan.rl_option_memory(params, QWEN, "float32", 2, 1000)
    assert copy["hf backend's bf16 copy of the weights (generation.dtype)"] == pytest.approx(
        QWEN.parameters * 2 / 1024**3
    )
    assert "hf backend's own weights (grpo.max_staleness)" not in copy
    params["generation"]["dtype"] = "float32"
    own = plan.rl_option_memory(params, QWEN, "float32", 2, 1000)
    assert own["hf backend's own weights (grpo.max_staleness)"] == pytest.approx(QWEN.parameters * 4 / 1024**3)
    assert "hf backend's bf16 copy of the weights (generation.dtype)" not in own
    params["generation"].update(backend="vllm", dtype="auto")
    assert "hf backend's bf16 copy of the weights (generation.dtype)" not in plan.rl_option_memory(
        params, QWEN, "float32", 2, 1000
    )
    assert extra["entropy bonus graph (grpo.entropy_coef)"] == pytest.approx(2 * 1000 * QWEN.vocab * 8 / 1024**3)
    path = tmp_path / "kl.yaml"
    path.write_text(yaml.safe_dump(params))
    text = "\n".join(plan.report(str(path), 80, tmp_path / "no-model")[0])
    assert "reference policy (grpo.kl_coef)" in text.split("GPU 1")[0]  # on the policy's GPU, not the engine's


def test_sft_filtering_names_its_reward_checked_against_the_traces_prompt():
    from a5core.rl.sft import SFTConfig

    assert SFTConfig().train_reward == REWARD_FNS["r1_zero"]  # the traces are r1_zero-formatted
    assert from_dict(SFTConfig, {"reward_fn": STRICT}, "sft").train_reward == STRICT
    with pytest.raises(ConfigError, match="grades the 'question_only' prompt's format"):
        from_dict(SFTConfig, {"reward_fn": QUESTION_ONLY}, "sft")


def test_a_training_stages_own_reward_keeps_the_reward_contract():
    """A custom reward named by a stage (or one run) lives in rewards/ and is called in a grader worker before any
    stage runs; a callable that breaks the contract is refused with what it did."""
    from a5core.checks.inputs import reward_contract_problem, reward_fn_problems
    from a5core.rl.sft import SFTConfig

    custom = "rewards.examples:answer_only_reward_fn"
    params = {"validation": {}, "sft": {"reward_fn": custom}, "grpo_runs": {"mine": {"reward_fn": custom}}}
    assert reward_fn_problems(params) == []  # called on the contract's pairs: it keeps it
    assert "TypeError" in reward_contract_problem("os:system", 5.0)  # a callable that is no reward function
    assert reward_fn_problems({"validation": {}, "grpo": {"reward_fn": STRICT}}) == []  # built-in: not called
    with pytest.raises(ConfigError, match="a custom reward lives in rewards/"):
        from_dict(SFTConfig, {"reward_fn": "os:system"}, "sft")


def test_validation_metrics_give_the_truncation_rate():
    from a5core.base.records import GradedSample
    from a5core.run.evaluation import summarize

    def sample(i, finish):
        return GradedSample(str(i), 0, "p", "r", "1", None, "wrong", 0.0, 0.0, 0.0, 8, finish, "s", "l")

    metrics, _, _ = summarize([sample(0, "length"), sample(1, "stop"), sample(2, "stop"), sample(3, "length")], 1)
    assert metrics["eval/truncation_rate"] == 0.5
