"""Fuzz the grader through the grading pool: N random hostile inputs, and what came back.

Every input is a (response, ground truth, rule) triple whose answer is *known to differ* from the ground
truth (huge values, power towers, infinities, code payloads, candidate lists, several boxes, noise,
Unicode confusables, deep nesting, long strings, near misses), so every reward of 1.0 among them is a
wrong reward. A tenth are control pairs of equal values, to show the grader still says yes. Inputs are
split by rule and graded by the production pools (`GraderPool` on the builtin reward paths, default time
limit), so hangs show up as status `timeout` and crashes as status `error` or an exception out of `map`.
Code payloads try to create a canary file; its existence is reported.

    .venv/bin/python bench/fuzz_grader.py --n 2000 --workers 2 --seed 0 --json reports/fuzzing.json
"""

import argparse
import collections
import json
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

from a5core.grader import GraderPool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.support
from tests.support.hostile_inputs import MACROS  # noqa: E402 -- importable once the root is on the path

logger = logging.getLogger("fuzz_grader")

PATHS = {
    "r1_zero": "a5core.grader:r1_zero_reward_fn",
    "r1_zero_strict": "a5core.grader:r1_zero_strict_reward_fn",
    "question_only": "a5core.grader:question_only_reward_fn",
}
TOWERS = (
    "{a}^{{{b}^{{{c}}}}}",
    "{a}^({b}^{c})",
    "{a}^[{b}^{c}]",
    "{a}^\\left({b}^{c}\\right)",
    "{a}^{b}^{c}",
    "e^{{e^{{{c}}}}}",
    "\\lfloor {a}^({b}^{c}) \\rfloor",
    "\\quad \\lfloor {a}^{{{b}^{c}}} \\rfloor",
    "\\sin({a}^{{{b}^{c}}})",
    "{a}^{{{c}!}}",
    "\\exp(\\exp({c}))",
)


def _huge(rng: random.Random) -> str:
    k = rng.randint(101, 10**6)
    return rng.choice(
        [
            f"10^{{{k}}}",
            f"1e{k}",
            f"\\exp({k + 200})",
            f"{k + 1000}!",
            f"\\binom{{{k + 1000}}}{{7}}",
            f"\\Gamma(10^{{{k % 9 + 4}}})",
            "9" * rng.randint(101, 2000),
            f"10^{{{k}}}\\pi",
        ]
    )


def _payload(rng: random.Random, canary: Path) -> str:
    c = str(canary)
    return rng.choice(
        [
            f"__import__('os').system('touch {c}')",
            f"eval(\"open('{c}','w')\")",
            f"(lambda: open('{c}','w'))()",
            f"\\text{{exec(\"open('{c}','w')\")}}",
            f"sympify(\"__import__('os').system('touch {c}')\")",
            f"x ** (lambda: open('{c}','w'))()",
        ]
    )


def _different(kind: str, rng: random.Random, canary: Path) -> tuple[str, str]:
    """(answer, ground truth) of different values, by construction."""
    a = rng.randint(-(10**6), 10**6)
    b = a + rng.choice([-1, 1]) * rng.randint(1, 1000)
    m = rng.randint(10, 90)
    cases = {
        "huge": lambda: (_huge(rng), str(b)),
        "tower": lambda: (
            rng.choice(TOWERS).format(a=rng.randint(2, 99), b=rng.randint(5, 99), c=rng.randint(40, 9999)),
            str(b),
        ),
        "infinity": lambda: rng.choice(
            [
                ("\\infty", str(b)),
                ("-\\infty", str(b)),
                (str(a), "\\infty"),
                ("\\pm\\infty", "\\infty"),
                ("-\\infty", "\\infty"),
                ("\\infty+1", "\\infty"),
            ]
        ),
        "code": lambda: (_payload(rng, canary), str(b)),
        "candidates": lambda: rng.choice(
            [
                (f"{b}, {a}", str(a)),
                (f"{b} or {a}", str(a)),
                (f"\\ldots {a}", str(a)),
                (f"\\boxed{{{a}}} \\boxed{{{b}}}", str(a)),
                (f"\\pm {a}", str(a)),
                (", ".join(str(i) for i in range(a, a + 50)) + ", \\ldots", str(a)),
            ]
        ),
        "noise": lambda: ("".join(rng.choice(MACROS) for _ in range(rng.randint(1, 60))), "987654321"),
        "confusable": lambda: rng.choice(
            [
                (f"{abs(a) % 90 + 3}²", f"{abs(a) % 90 + 3}2"),
                (f"{a}_0", str(a)),
                (f"{a}₀", str(a)),
                ("х", "x"),
                ("３½", "\\frac{3}{2}"),
                (f"{abs(a) % 9 + 2} 0", "0"),
            ]
        ),
        "deep": lambda: ("(" * (m // 3) + str(a) + ")" * (m // 3), str(b)),
        "long": lambda: (rng.choice(["1", "a", "x ", "\\text{", "{,}", "1,", "9^"]) * rng.randint(100, 5000), "1"),
        "near": lambda: rng.choice(
            [
                (f"{b} + 10^{{-{m}}}", str(b)),
                (f"10^{{{m}}}\\sqrt{{2}} + 1", f"10^{{{m}}}\\sqrt{{2}}"),
                ("1.4142135623731", "\\sqrt{2}"),
                ("3.14159265358979", "\\pi"),
                (f"\\frac{{{a}}}{{{m}}}", f"\\frac{{{a + 1}}}{{{m}}}"),
            ]
        ),
    }
    return cases[kind]()


def _equal(rng: random.Random) -> tuple[str, str]:
    """A control pair: two renderings of one value."""
    n = rng.randint(0, 10**6)
    return rng.choice(
        [
            (str(n), f"\\frac{{{2 * n}}}{{2}}"),
            (f"{n:,}", str(n)),
            (f"x = {n}", str(n)),
            (f"\\sqrt{{{n * n}}}", str(n)),
            (f"{n}\\text{{ cm}}", f"{n}.0"),
            (f"\\${n}", str(n)),
        ]
    )


def wrap(answer: str, rule: str, rng: random.Random, hostile: bool = True) -> str:
    """A response for `rule`; hostile ones sometimes repeat boxes or tags or add trailing text."""
    if rule == "question_only":
        return (
            f"So \\boxed{{{answer}}}."
            if not hostile
            else rng.choice([f"So \\boxed{{{answer}}}.", f"\\boxed{{{answer}}}" * rng.randint(1, 3)])
        )
    body = rng.choice([answer, f"\\boxed{{{answer}}}"])
    tail = rng.choice(["", "", " trailing", "</answer>", "<answer>"]) if hostile else ""
    return f"<think>work</think> <answer>{body}</answer>{tail}"


def generate(n: int, seed: int, canary: Path) -> list[dict]:
    """n items: {rule, response, gt, kind, expect_equal}; one in ten is an equal-valued control pair."""
    rng = random.Random(seed)
    kinds = ["huge", "tower", "infinity", "code", "candidates", "noise", "confusable", "deep", "long", "near"]
    items = []
    for i in range(n):
        rule = rng.choice(list(PATHS))
        if i % 10 == 9:
            (answer, gt), kind = _equal(rng), "control"
        else:
            kind = rng.choice(kinds)
            answer, gt = _different(kind, rng, canary)
        items.append(
            {
                "rule": rule,
                "response": wrap(answer, rule, rng, kind != "control"),
                "gt": gt,
                "kind": kind,
                "expect_equal": kind == "control",
            }
        )
    return items


def run(items: list[dict], workers: int, timeout_s: float) -> tuple[list[dict], float, int]:
    """Grade items rule by rule in the production pools; returns (results, grading seconds, escaped exceptions)."""
    results: list[dict] = [{} for _ in items]
    seconds, escaped = 0.0, 0
    for rule, path in PATHS.items():
        idx = [i for i, it in enumerate(items) if it["rule"] == rule]
        with GraderPool(path, workers=workers, timeout_s=timeout_s) as pool:
            pool.map([items[idx[0]]["response"]], [items[idx[0]]["gt"]])  # start the workers outside the clock
            t = time.monotonic()
            try:
                out = pool.map([items[i]["response"] for i in idx], [items[i]["gt"] for i in idx])
            except Exception as err:  # an exception escaping the pool is exactly what this bench counts
                logger.exception("GraderPool.map raised")
                escaped += 1
                out = [{"status": f"escaped {type(err).__name__}", "reward": 0.0}] * len(idx)
            seconds += time.monotonic() - t
        for i, o in zip(idx, out, strict=True):
            results[i] = o
    return results, seconds, escaped


def summarize(items: list[dict], results: list[dict], seconds: float, escaped: int, canary: Path) -> dict:
    wrong = [
        (it["kind"], it["rule"], it["response"][:120], it["gt"])
        for it, r in zip(items, results, strict=True)
        if not it["expect_equal"] and r["reward"] == 1.0
    ]
    controls = [r["reward"] for it, r in zip(items, results, strict=True) if it["expect_equal"]]
    return {
        "inputs": len(items),
        "hostile": len(items) - len(controls),
        "controls": len(controls),
        "hangs_timeouts": sum(r["status"] == "timeout" for r in results),
        "crashes": escaped + sum(r["status"] == "error" or r["status"].startswith("escaped") for r in results),
        "wrong_1.0_rewards": len(wrong),
        "wrong_examples": wrong[:10],
        "control_recall": sum(controls) / max(1, len(controls)),
        "code_executed": canary.exists(),
        "seconds": round(seconds, 2),
        "items_per_s": round(len(items) / seconds, 1),
        "status_counts": dict(collections.Counter(r["status"] for r in results)),
        "by_kind": dict(collections.Counter(it["kind"] for it in items)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=5.0, help="per-item limit (GraderPool's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="", help="also write the summary here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        canary = Path(tmp) / "canary"
        items = generate(a.n, a.seed, canary)
        results, seconds, escaped = run(items, a.workers, a.timeout)
        summary = summarize(items, results, seconds, escaped, canary)
    print(json.dumps(summary, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
