"""A seeded, procedurally generated, MATH-shaped arithmetic dataset with an imperfect teacher.

Subjects: multi-term sums, products, mixed operations with precedence, linear equations, fractions.
Level 1..5 grows the operands and the number of steps. The teacher writes step-by-step traces in the
r1_zero response format (`... </think> <answer>...</answer>`); with probability `error_rate` a trace
contains one arithmetic slip whose wrong value is carried through every later step, so its final answer
is wrong — as in real strong-model traces, which is what makes filtering matter.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

SUBJECTS = ("Multi-term Sums", "Products", "Mixed Operations", "Linear Equations", "Fractions")


def fmt(v: Fraction | int) -> str:
    v = Fraction(v)
    if v.denominator == 1:
        return str(v.numerator)
    sign = "-" if v < 0 else ""
    return f"{sign}\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}"


class Trace:
    """Records reasoning steps; the step numbered `slip_at` gets a wrong value that later steps reuse."""

    def __init__(self, rng: random.Random, slip_at: int | None):
        self.rng, self.slip_at, self.lines, self.n = rng, slip_at, [], 0

    def step(self, template: str, value: Fraction | int) -> Fraction:
        value = Fraction(value)
        if self.n == self.slip_at:
            delta = self.rng.choice([-10, -2, -1, 1, 2, 10])
            value = value + (Fraction(delta, value.denominator) if value.denominator > 1 else delta)
        self.lines.append(template.replace("{v}", fmt(value)))
        self.n += 1
        return value


@dataclass(frozen=True)
class SyntheticProblem:
    """A generated question with its worked solution (the truth) or the teacher's (maybe wrong) one; its row in
    data/prepared/ is a5core.base.records.Problem."""

    subject: str
    level: int
    problem: str
    answer: str
    trace_lines: tuple[str, ...]
    n_steps: int


def _sums(rng, level, t: Trace):
    terms = [rng.randint(1, 10 * level**2) for _ in range(level + 1)]
    acc = Fraction(terms[0])
    for x in terms[1:]:
        acc = t.step(f"{fmt(acc)} + {x} = {{v}}.", acc + x)
    return f"Compute ${' + '.join(map(str, terms))}$.", acc


def _products(rng, level, t: Trace):
    a, b = rng.randint(2, 4 * level + 5), rng.randint(2, 3 * level + 4)
    if level <= 2 or b < 10:
        return f"Compute ${a} \\times {b}$.", t.step(f"{a} \\times {b} = {{v}}.", a * b)
    tens, ones = b // 10 * 10, b % 10
    p1 = t.step(f"{a} \\times {tens} = {{v}}.", a * tens)
    p2 = t.step(f"{a} \\times {ones} = {{v}}.", a * ones)
    return f"Compute ${a} \\times {b}$.", t.step(f"{fmt(p1)} + {fmt(p2)} = {{v}}.", p1 + p2)


def _mixed(rng, level, t: Trace):
    a, b, c = rng.randint(1, 10 * level), rng.randint(2, 3 + level), rng.randint(2, 3 + 2 * level)
    prod = t.step(f"Multiplication first: {b} \\times {c} = {{v}}.", b * c)
    if level >= 3:
        d = rng.randint(1, 5 * level)
        s = t.step(f"{a} + {fmt(prod)} = {{v}}.", a + prod)
        return f"Compute ${a} + {b} \\times {c} - {d}$.", t.step(f"{fmt(s)} - {d} = {{v}}.", s - d)
    return f"Compute ${a} + {b} \\times {c}$.", t.step(f"{a} + {fmt(prod)} = {{v}}.", a + prod)


def _linear(rng, level, t: Trace):
    x, a, b = rng.randint(-3 * level, 5 * level), rng.randint(2, 2 + 2 * level), rng.randint(1, 8 * level)
    rhs = a * x + b
    ax = t.step(f"Subtract {b} from both sides: {a}x = {rhs} - {b} = {{v}}.", rhs - b)
    return f"Solve for $x$: ${a}x + {b} = {rhs}$.", t.step(f"Divide both sides by {a}: x = {{v}}.", ax / a)


def _fractions(rng, level, t: Trace):
    d1, d2 = rng.randint(2, 2 + level), rng.randint(2, 3 + 2 * level)
    n1, n2 = rng.randint(1, d1 - 1), rng.randint(1, d2 - 1)
    den = math.lcm(d1, d2)
    s = t.step(
        f"Common denominator {den}: \\frac{{{n1 * den // d1}}}{{{den}}} + \\frac{{{n2 * den // d2}}}{{{den}}} = {{v}}.",
        Fraction(n1, d1) + Fraction(n2, d2),
    )
    return f"Compute $\\frac{{{n1}}}{{{d1}}} + \\frac{{{n2}}}{{{d2}}}$. Give the answer in lowest terms.", s


GENERATORS: dict[str, Callable] = dict(zip(SUBJECTS, (_sums, _products, _mixed, _linear, _fractions)))


def make_problem(
    rng: random.Random, subject: str, level: int, error_rate: float
) -> tuple[SyntheticProblem, SyntheticProblem]:
    """(correct, teacher) versions of one problem; the teacher's may contain a propagated slip."""
    side = random.Random(rng.getrandbits(64))  # slip decisions never disturb the problem's own draws
    state = rng.getstate()
    truth_trace = Trace(side, None)
    question, truth = GENERATORS[subject](rng, level, truth_trace)
    end = rng.getstate()
    rng.setstate(state)
    slip_at = side.randrange(truth_trace.n) if side.random() < error_rate else None
    teach = Trace(side, slip_at)
    GENERATORS[subject](rng, level, teach)
    assert rng.getstate() == end, "teacher and truth must see the same problem"
    lines = tuple(teach.lines)
    teacher_answer = teach_value(teach)
    return (
        SyntheticProblem(subject, level, question, fmt(truth), tuple(truth_trace.lines), truth_trace.n),
        SyntheticProblem(subject, level, question, teacher_answer, lines, teach.n),
    )


def teach_value(t: Trace) -> str:
    """The value written in the teacher's last step."""
    last = t.lines[-1].rstrip(".")
    return last.rsplit("= ", 1)[-1].strip()


def response_text(p: SyntheticProblem) -> str:
    """r1_zero response (continues the prompt's `<think>`)."""
    return " " + " ".join(p.trace_lines) + f" </think> <answer>{p.answer}</answer>"


def solution_text(p: SyntheticProblem) -> str:
    return " ".join(p.trace_lines) + f" The answer is $\\boxed{{{p.answer}}}$."


def generate(
    n_train: int, n_validation: int, n_sft: int, error_rate: float, seed: int, max_level: int = 5
) -> dict[str, list[dict]]:
    """Disjoint splits by normalized problem text: MATH-shaped rows for train/validation, SFT trace rows."""
    rng = random.Random(seed)
    seen: set[str] = set()
    splits: dict[str, list] = {"train": [], "validation": [], "sft": []}
    order = ["validation"] * n_validation + ["sft"] * n_sft + ["train"] * n_train
    attempts = 0
    for split in order:
        while True:
            attempts += 1
            if attempts > 50 * len(order) + 1000:
                raise RuntimeError(
                    "synthetic generator ran out of unique problems; lower the counts or raise max_level"
                )
            subject, level = rng.choice(SUBJECTS), rng.randint(1, max_level)
            truth, teacher = make_problem(rng, subject, level, error_rate if split == "sft" else 0.0)
            key = normalize_problem(truth.problem)
            if key not in seen:
                seen.add(key)
                break
        splits[split].append((truth, teacher))
    return {name: [_row(name, i, t, tch) for i, (t, tch) in enumerate(rows)] for name, rows in splits.items()}


def normalize_problem(text: str) -> str:
    return " ".join(text.lower().split())


def _row(split: str, i: int, truth: SyntheticProblem, teacher: SyntheticProblem) -> dict:
    uid = f"synthetic/{split}/{truth.subject.lower().replace(' ', '_')}/{i:06d}"
    base = {
        "unique_id": uid,
        "problem": truth.problem,
        "answer": truth.answer,
        "solution": solution_text(truth),
        "subject": truth.subject,
        "level": f"Level {truth.level}",
        "source": "synthetic",
    }
    if split != "sft":
        return base
    return {**base, "response": response_text(teacher), "teacher_answer": teacher.answer}
