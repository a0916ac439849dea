"""The training loops in unit tests, on a tiny model: stand-ins for their collaborators and short runs of them.

- Stand-ins (logic only; the real engine, grader and evaluation are tested on their own): `StubBackend` cycles
  through fixed texts, `StubPool` rewards 'good', `StubValidator` returns a fixed evaluation (`stub_evaluation`),
  `DyingHistory` is a RunHistory whose process is 'killed' at a given step.
- Rows: `ROWS` (problems for GRPO and EI), `SFT_ROWS` (prompt/response pairs for SFT); `flat_grads(model)`.
- GRPO: `grpo_cfg(**overrides)` (a 2-step config on those rows) and `run_grpo(policy, tok, folder, cfg, ...)`.
- SFT: `run_sft(model, tok, folder, cfg, ...)`.
- Asynchronous rollouts: `Recorder` (what each GRPO step trained on, and each version's weights), and
  `sampled_log_probs(model, weights, tok, samples)` with `max_gap` to say which version sampled them.

May import: a5core and torch. Test modules import this; it imports no test module.
"""

import copy
import os
import signal

import torch

import a5core.rl.grpo as grpo_mod
from a5core.generation.base import Completion
from a5core.model.compute import Compute
from a5core.rl.grpo import GRPOConfig, train_grpo
from a5core.rl.sft import train_sft
from a5core.run.evaluation import Evaluation
from a5core.run.history import RunHistory

ROWS = [
    {"unique_id": f"q{i}", "problem": f"Compute {i} + {i}.", "answer": str(2 * i), "subject": "s", "level": "Level 1"}
    for i in range(6)
]
SFT_ROWS = [
    {
        "unique_id": str(i),
        "prompt": f"Compute {i} + 1.",
        "response": f" {i} + 1 = {i + 1}. </think> <answer>{i + 1}</answer>",
    }
    for i in range(8)
]
METRICS = {
    "eval/accuracy": 0.0,
    "eval/accuracy_lo": 0.0,
    "eval/accuracy_hi": 0.5,
    "eval/format_rate": 0.0,
    "count/questions": 4,
    "count/samples_per_question": 1,
    "eval/response_tokens": 0.0,
    "eval/entropy": 0.0,
}


class StubBackend:
    """Each prompt gets n completions cycling through `texts`."""

    def __init__(self, tok, texts):
        self.tok, self.texts, self.calls, self.synced = tok, texts, 0, []

    def _completion(self, text):
        return Completion(text, tuple(self.tok(text, add_special_tokens=False)["input_ids"]), "stop")

    def generate(self, prompts, sampling, progress=True):
        self.calls += 1
        return [[self._completion(self.texts[j % len(self.texts)]) for j in range(sampling.n)] for _ in prompts]

    takes_shards = False  # a5core/generation/base.py's Backend: synced from whole weights under fsdp2

    def sync_weights(self, policy):
        self.synced.append(next(policy.parameters()).detach().clone())

    def keep_own_weights(self):
        pass  # fixed texts: no weights to keep


class StubPool:
    """Reward 1 for responses containing 'good'."""

    path = "tests:stub"

    maps = 0  # `map` calls so far

    def seconds(self) -> float:
        return float(self.maps)  # a clock that says one second per `map` call: what a step's grading adds is known

    def same_answers(self, pairs):
        return [a == b for a, b in pairs]

    def map(self, responses, gts, progress=False):
        self.maps += 1
        out = []
        for r in responses:
            ok = float("good" in r)
            out.append(
                {
                    "format_reward": 1.0,
                    "answer_reward": ok,
                    "reward": ok,
                    "status": "correct" if ok else "wrong",
                    "extracted": r,
                    "normalized_pred": r,
                    "normalized_gt": "",
                    "detail": "",
                }
            )
        return out

    def audit(self, responses, gts, prompt):
        return [None] * len(responses)  # no grader audit (GraderPool(audit=False))


def stub_evaluation(accuracy: float = 0.0) -> Evaluation:
    return Evaluation([], {**METRICS, "eval/accuracy": accuracy}, {}, {"q0": accuracy}, [])


class StubValidator:
    """validate(policy, full=...) -> a fixed evaluation; syncs the backend like pipeline.Validator."""

    def __init__(self, backend=None):
        self.backend, self.calls = backend, []

    def __call__(self, policy, *, full):
        self.calls.append(full)
        if self.backend is not None:
            self.backend.sync_weights(policy)
        return stub_evaluation()


class DyingHistory(RunHistory):
    """A RunHistory whose process is 'killed' (KeyboardInterrupt) when it logs train step `die_at`, and sent SIGUSR1
    (a preemption) when it logs train step `signal_at`."""

    def __init__(self, folder, die_at=None, signal_at=None, **kw):
        super().__init__(folder / "live", folder / "logs", name="test", total_steps=0, **kw)
        self.die_at, self.signal_at = die_at, signal_at

    def log(self, kind, row, *, echo=True):
        super().log(kind, row, echo=echo)
        if kind == "train" and row["step"] == self.die_at and echo:
            raise KeyboardInterrupt("killed")
        if kind == "train" and row["step"] == self.signal_at and echo:
            os.kill(os.getpid(), signal.SIGUSR1)


def flat_grads(model) -> torch.Tensor:
    """Every parameter's gradient, flattened into one tensor (those without a gradient left out)."""
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


INITIAL = {"metrics": METRICS, "per_question": {"q0": 0.0}}


def grpo_cfg(**kw) -> GRPOConfig:
    """Two GRPO steps of 8 rollouts (2 questions x 4) in 2 micro-batches, a checkpoint after each, no mid-run eval."""
    base = dict(
        n_grpo_steps=2,
        lr=3e-3,
        rollout_batch_size=8,
        group_size=4,
        train_batch_size=8,
        gradient_accumulation_steps=2,
        max_tokens=8,
        eval_every=0,
        eval_examples=2,
        checkpoint_every=1,
    )
    return GRPOConfig(**{**base, **kw})


def run_grpo(
    policy,
    tok,
    folder,
    cfg,
    texts=(" good", " bad"),
    ckpt=None,
    die_at=None,
    backend=None,
    validate=None,
    initial=None,
    signal_at=None,
):
    """train_grpo on ROWS with the stand-ins (a StubBackend of `texts` unless `backend`, a StubValidator unless
    `validate`), logging under `folder`; `die_at`: killed when logging that train step (`signal_at`: sent SIGUSR1);
    `initial`: the start's validation record (default INITIAL). Returns (the run's details, its history)."""
    with DyingHistory(folder, die_at, signal_at) as history:
        result = train_grpo(
            policy,
            tok,
            backend or StubBackend(tok, list(texts)),
            train_rows=ROWS,
            cfg=cfg,
            pool=StubPool(),
            validate=validate or StubValidator(),
            history=history,
            ckpt=ckpt,
            initial=initial or INITIAL,
            compute=Compute(),
        )
    return result.details, history


def run_sft(model, tok, folder, cfg, rows=None, ckpt=None, die_at=None, validate=None, **kw):
    """train_sft on `rows` (default SFT_ROWS) with a StubValidator unless `validate`, logging under `folder`;
    `die_at`: killed when logging that train step; `kw`: more of train_sft's keywords (compute: default the
    reference path, `Compute()`). Returns (the final evaluation, the history)."""
    with DyingHistory(folder, die_at) as history:
        final = train_sft(
            model,
            tok,
            rows=SFT_ROWS if rows is None else rows,
            cfg=cfg,
            validate=validate or StubValidator(),
            history=history,
            initial={"metrics": METRICS},
            ckpt=ckpt,
            **{"compute": Compute(), **kw},  # the reference path unless the test passes its own
        ).final
    return final, history


class Recorder:
    """What a GRPO run did (a5core.rl.grpo patched for the test): each step's graded samples, stats and batch, and the
    weights of each version (the start, then after each step); `before_update(run)` and `after_update(run)` run
    around each update."""

    def __init__(self, monkeypatch, policy, after_update=lambda run: None, before_update=lambda run: None):
        self.samples, self.batches, self.versions = [], [], [copy.deepcopy(policy.state_dict())]
        self.stats = []
        prepared, update = grpo_mod.prepared, grpo_mod.update_policy

        def record_prepared(run, samples, stats, timing):
            self.samples.append(samples)
            self.stats.append(stats)
            return prepared(run, samples, stats, timing)

        def record_update(run, rollouts, step):
            self.batches.append(rollouts.batch)
            before_update(run)
            update(run, rollouts, step)
            self.versions.append(copy.deepcopy(run.policy.state_dict()))
            after_update(run)

        monkeypatch.setattr(grpo_mod, "prepared", record_prepared)
        monkeypatch.setattr(grpo_mod, "update_policy", record_update)


def sampled_log_probs(model, weights, tok, samples) -> list[torch.Tensor]:
    """Each sample's sampled ids' log-probs under `weights` (O_i,): one forward of prompt + ids."""
    scratch = copy.deepcopy(model)
    scratch.load_state_dict(weights)
    out = []
    with torch.no_grad():
        for s in samples:
            prompt = tok(s.prompt, add_special_tokens=False)["input_ids"]
            ids = torch.tensor([prompt + list(s.token_ids)])  # (1, P+O)
            lp = torch.log_softmax(scratch(ids).logits.float(), -1)[0, len(prompt) - 1 : -1]  # (O, V)
            out.append(lp.gather(-1, torch.tensor(s.token_ids).view(-1, 1)).squeeze(-1))  # (O,)
    return out


def max_gap(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """The largest difference of two lists of equal-length 1-D tensors."""
    return max(float((x - y).abs().max()) for x, y in zip(a, b) if len(x))
