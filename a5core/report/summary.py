"""`reports/summary.md`: every method's validation accuracy with its 95% interval, the paired change of every trained
run from its starting policy, which changes the protocol resolves, and what it can and cannot resolve; with seed
replicates, each replicated run's mean over its seeds with a hierarchical interval (a5core.report.replicates); and one
validation question's rollouts before and after GRPO, picked by a fixed rule (`example_rollouts_text`)."""

from __future__ import annotations

import re

from a5core.base.run_record import machine_kind
from a5core.base.stats import min_detectable_difference
from a5core.config.sections import DataConfig
from a5core.report.plots import Result


def validation_set(cfg: DataConfig) -> str:
    """Which questions every stage validates on, in words (the protocol line; a5core.data.prepare selects them)."""
    if not cfg.validation_source:
        return f"held out from {cfg.source}, seeded"
    subset = f"the {cfg.validation_subset} subset of " if cfg.validation_subset else ""
    return f"{subset}{cfg.validation_source}{', a seeded draw' if cfg.n_validation else ''}"


def _acc(m: dict) -> str:
    return f"{m['eval/accuracy']:.3f} ({m['eval/accuracy_lo']:.3f}–{m['eval/accuracy_hi']:.3f})"


def _delta(m: dict) -> str:
    if "eval/delta" not in m:
        return "—"
    mark = " **✓**" if m["eval/delta_excludes_zero"] else ""
    return f"{m['eval/delta']:+.3f} ({m['eval/delta_lo']:+.3f} to {m['eval/delta_hi']:+.3f}){mark}"


def _at_k(m: dict) -> str:
    """pass@k and maj@n with their intervals, and their paired changes where measured ("—" at one sample)."""
    at_k = ("eval/pass@", "eval/maj@")
    names = [k[len("eval/") : -len("_lo")] for k in m if k.startswith(at_k) and k.endswith("_lo")]
    cells = []
    for name in names:
        cell = f"{name} {m[f'eval/{name}']:.3f} ({m[f'eval/{name}_lo']:.3f}–{m[f'eval/{name}_hi']:.3f})"
        if f"eval/delta_{name}" in m:
            lo, hi = m[f"eval/delta_{name}_lo"], m[f"eval/delta_{name}_hi"]
            mark = " **✓**" if lo > 0 or hi < 0 else ""
            cell += f", change {m[f'eval/delta_{name}']:+.3f} ({lo:+.3f} to {hi:+.3f}){mark}"
        cells.append(cell)
    return "; ".join(cells) or "—"


def protocol_text(results: list[Result], validation_set: str = "") -> list[str]:
    """What the validation protocol is (on which questions: `validation_set`) and the smallest change it resolves."""
    m = next((r.metrics for r in results if r.method != "zero-shot"), results[0].metrics)
    n, k = m["count/questions"], m["count/samples_per_question"]
    levels = [0.1, 0.3, 0.5]
    mde = ", ".join(f"{min_detectable_difference(n, k, p):.3f} at accuracy {p:.1f}" for p in levels)
    return [
        f"Protocol: {n} validation questions{f' ({validation_set})' if validation_set else ''} x {k} sample(s) each "
        f"(avg@{k}), the same questions and per-request sample "
        "seeds for every policy. Intervals are 95%: Wilson for one sample per question, otherwise a bootstrap over "
        "questions; a change is the paired difference from the run's starting policy on the same questions, with a "
        "bootstrap interval over questions. ✓ marks a change whose interval excludes zero.",
        "",
        f"Smallest paired change this protocol detects with 80% power (two-sided 5%): {mde}. Smaller true changes "
        "can go unmarked; a change without ✓ is not evidence of no effect.",
        *(
            [
                "",
                f"With {k} samples per question: pass@k is Chen et al.'s unbiased estimate from the {k} samples, "
                f"maj@{k} the majority vote over the answers, grouped into classes the grader judges equal (every "
                "correct answer one class, the wrong ones by the same rules; a tie goes to the answer sampled first), "
                "each with a bootstrap interval over questions and a paired change like accuracy's.",
            ]
            if k > 1
            else []
        ),
    ]


def replicates_text(intervals: dict[tuple[str, str], dict]) -> list[str]:
    """The seed-replicate table: each (method, run) with more than one training seed, its mean accuracy over them with
    the hierarchical interval (a5core.report.replicates.hierarchical_interval) and the share of variance between
    seeds."""
    rows = {key: h for key, h in intervals.items() if h["seeds"] > 1}
    if not rows:
        return []
    lines = [
        "",
        "Seed replicates (`replicates`): each replicated run's mean accuracy over its training seeds, with a 95% "
        "interval from a hierarchical bootstrap (seeds drawn with replacement, then questions). The seed SD is the "
        "standard deviation of the replicates' accuracies; the between-seed share is the seed variance over the seed "
        "plus question-sampling variance of one run's accuracy: near 1, another seed moves a run more than the "
        "interval over questions says. With few seeds the seed level of the interval is coarse (3 seeds: 10 "
        "distinct draws).",
        "",
        "| method | run | seeds | mean accuracy (95% CI, seeds and questions) | seed SD | between-seed share |",
        "|---|---|---|---|---|---|",
    ]
    for (method, run), h in rows.items():
        lines.append(
            f"| {method} | {run} | {h['seeds']} | {h['mean']:.3f} ({h['lo']:.3f}–{h['hi']:.3f}) | {h['seed_sd']:.3f} "
            f"| {h['between_share']:.2f} |"
        )
    return lines


def generation_precision(autocast: dict) -> str:
    """The hf backend's precision in a run record's autocast entry; records older than the setting generated under the
    training's autocast."""
    if "generation_bf16" in autocast:
        return "bf16 (a copy of the weights)" if autocast["generation_bf16"] else "float32"
    return "bf16 autocast" if autocast["bf16_autocast"] else "float32"


def made_on_text(records: list[dict]) -> list[str]:
    """Which machine kind(s), autocast and commit(s) made the numbers, from the stages' run records."""
    if not records:
        return []
    kinds = sorted({machine_kind(r["machine"]) for r in records if "machine" in r})
    casts = sorted(
        {f"{a['mode']} (bf16 {'on' if a['bf16_autocast'] else 'off'})" for r in records if (a := r.get("autocast"))}
    )
    generation = sorted({generation_precision(a) for r in records if (a := r.get("autocast"))})
    commits = sorted({r.get("code_revision", "unknown") for r in records})
    return [
        f"Made on: {'; '.join(kinds)}. model.autocast: {', '.join(casts) or 'not recorded'}; generation in "
        f"{', '.join(generation) or 'not recorded'}. Code: {', '.join(commits)} ({len(records)} stage runs; "
        "each stage's `run_record.json`). Reruns are bit-identical on the same machine kind with the same precisions; "
        "another CPU kind, precision or a GPU agrees only within the intervals.",
        "",
    ]


def _question(prompt: str) -> str:
    """The user's question inside a prompt template (`User: ... Assistant:`), else the whole prompt."""
    head, _, rest = prompt.partition("User: ")
    return (rest or head).split("\nAssistant:")[0].strip()


def _ticks(text: str, least: int) -> str:
    """A run of backticks longer than any inside `text` (and at least `least`): a code span or fence it cannot close."""
    return "`" * max(least, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))


def _code(text: str) -> str:
    """`text` verbatim as inline code (Markdown and HTML in it shown, not rendered)."""
    ticks = _ticks(text, 1)
    return f"{ticks} {text} {ticks}" if text.startswith("`") or text.endswith("`") else f"{ticks}{text}{ticks}"


def _fenced(text: str) -> list[str]:
    """`text` verbatim in a fenced block (blank lines around it dropped)."""
    fence = _ticks(text, 3)
    return [fence + "text", text.strip("\n"), fence]


def example_rollouts_text(run: str, completions: list[dict]) -> list[str]:
    """One validation question's rollouts before GRPO (the run's step-0 evaluation) and after (its last), from the
    run's completions table (a5core.run.evaluation `completions`). The rule: among the questions whose first sample
    is shown at both evaluations (validation order), the first whose reward differs between them, else the first."""
    first = [c for c in completions if c.get("shown") == "first"]
    last = max((c["step"] for c in first), default=0)
    before, after = {}, {}
    for c in first:
        if c["step"] in (0, last):
            (before if c["step"] == 0 else after).setdefault(c["unique_id"], c)
    both = [q for q in before if q in after]
    if not last or not both:
        return []
    q = next((q for q in both if before[q]["reward"] != after[q]["reward"]), both[0])
    lines = [
        "",
        "## A validation question before and after GRPO",
        "",
        f"`grpo@{run}`, question {_code(q)}: of the validation questions whose first sample both evaluations show, the "
        "first whose reward changed (else the first one). The prompt's question, then the policy's response at the "
        f"start (step 0) and after the last step (optimizer step {last}), each with its reward.",
        "",
        f"Question (answer {_code(str(before[q]['ground_truth']))}):",
        "",
        *_fenced(_question(before[q]["prompt"])),
    ]
    for label, c in ((f"Before GRPO (step 0), reward {before[q]['reward']}:", before[q]),
                     (f"After GRPO (step {last}), reward {after[q]['reward']}:", after[q])):  # fmt: skip
        lines += ["", label, "", *_fenced(c["response"])]
    return lines


def summary_markdown(
    results: list[Result],
    figures_rel: str,
    notes: list[str] | None = None,
    records: list[dict] | None = None,
    validation_set: str = "",
    replicates: dict[tuple[str, str], dict] | None = None,
    examples: list[str] | None = None,
) -> str:
    lines = [
        "# Summary",
        "",
        "Validation accuracy of every method and run (written by the `plots` stage).",
        "",
        *protocol_text(results, validation_set),
        "",
        *made_on_text(records or []),
    ]
    lines += notes or []
    at_k = any(_at_k(r.metrics) != "—" for r in results)  # a column only when some protocol drew n > 1 samples
    lines += [
        "| method | run | accuracy (95% CI) | change from start (95% CI) | starting accuracy |"
        + (" pass@k, maj@n (95% CI) |" if at_k else "")
        + " figure |",
        "|---|---|---|---|---|" + ("---|" if at_k else "") + "---|",
    ]
    for r in results:
        start = f"{r.metrics['eval/initial_accuracy']:.3f}" if "eval/initial_accuracy" in r.metrics else "—"
        run = f"{r.run} ({r.detail})" if r.detail else r.run
        lines.append(
            f"| {r.method} | {run} | {_acc(r.metrics)} | {_delta(r.metrics)} | {start} |"
            + (f" {_at_k(r.metrics)} |" if at_k else "")
            + f" [{r.figure}]({figures_rel}/{r.figure}) |"
        )
    lines += replicates_text(replicates or {})
    lines += examples or []
    return "\n".join(lines) + "\n"
