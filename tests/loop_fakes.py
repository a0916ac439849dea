"""Stand-ins for the loops' collaborators in unit tests: a backend that cycles through fixed texts, a grader that
rewards 'good', a validator that returns a fixed evaluation, and a RunHistory that dies at a given step.
They stand in for logic only (the real engine, grader and evaluation are tested on their own)."""

from a5core.evaluation import Evaluation
from a5core.generation.base import Completion
from a5core.history import RunHistory

ROWS = [
    {"unique_id": f"q{i}", "problem": f"Compute {i} + {i}.", "answer": str(2 * i), "subject": "s", "level": "Level 1"}
    for i in range(6)
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

    def sync_weights(self, policy):
        self.synced.append(next(policy.parameters()).detach().clone())


class StubPool:
    """Reward 1 for responses containing 'good'."""

    path = "tests:stub"

    def map(self, responses, gts, progress=False):
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
    """A RunHistory whose process is 'killed' (KeyboardInterrupt) when it logs train step `die_at`."""

    def __init__(self, folder, die_at=None, **kw):
        super().__init__(folder / "live", folder / "logs", name="test", total_steps=0, **kw)
        self.die_at = die_at

    def log(self, kind, row, *, echo=True):
        super().log(kind, row, echo=echo)
        if kind == "train" and row["step"] == self.die_at and echo:
            raise KeyboardInterrupt("killed")
