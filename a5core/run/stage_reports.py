"""Markdown reports written by stages (case analysis of an evaluation, SFT-data filtering, EI rounds).

Model output and data text are untrusted: every such cell goes through `md_cell`, which turns each character that
Markdown or HTML would interpret into a numeric entity, so a response renders as the literal text it is (its own
`<think>`/`<answer>` tags stay visible) and no `<script>`, event handler, image, link or emphasis can take effect.
"""

from __future__ import annotations

import json

from a5core.base.records import GradedSample

# Characters with a meaning in Markdown or HTML (and ':' so no URL is auto-linked), written as entities.
_INERT = {ord(c): f"&#{ord(c)};" for c in "&<>\"'\\`*_[](){}!|#~:=+-"} | {ord("\n"): " ⏎ ", ord("\r"): " "}


def md_cell(text: str | None, limit: int = 300) -> str:
    """`text` as an inert Markdown table cell, clipped to `limit` characters (see the module docstring)."""
    s = text or ""
    clipped = len(s) > limit
    return s[:limit].translate(_INERT) + (" …" if clipped else "")


def _interval(m: dict) -> str:
    return f"**{m['eval/accuracy']:.3f}** (95% CI {m['eval/accuracy_lo']:.3f}–{m['eval/accuracy_hi']:.3f})"


def eval_case_report(
    title: str, samples: list[GradedSample], metrics: dict, breakdown: dict, per_category: int = 3
) -> str:
    """Examples of each handout category with their grading status, so model and parser errors can be told apart."""
    lines = [
        f"# {title}",
        "",
        f"accuracy {_interval(metrics)}, format rate **{metrics['eval/format_rate']:.3f}**, over "
        f"{metrics['count/questions']} questions x {metrics['count/samples_per_question']} samples",
        "",
        "| category | count |",
        "|---|---|",
        f"| format 1, answer 1 | {metrics['eval/format1_answer1']} |",
        f"| format 1, answer 0 | {metrics['eval/format1_answer0']} |",
        f"| format 0, answer 0 | {metrics['eval/format0_answer0']} |",
        "",
        "Grading status counts (parse failures vs wrong answers): " + md_cell(json.dumps(breakdown["status_counts"])),
        "",
    ]
    categories = {
        "format 1, answer 1": lambda s: s.format_reward == 1 and s.answer_reward == 1,
        "format 1, answer 0": lambda s: s.format_reward == 1 and s.answer_reward == 0,
        "format 0, answer 0": lambda s: s.format_reward == 0,
    }
    for name, chosen in categories.items():
        lines += [f"## {name}", "", "| id | status | extracted | ground truth | response |", "|---|---|---|---|---|"]
        for s in [s for s in samples if chosen(s)][:per_category]:
            lines.append(
                f"| {md_cell(s.unique_id, 60)} | {md_cell(s.status)} | {md_cell(s.extracted, 40)} "
                f"| {md_cell(s.ground_truth, 40)} | {md_cell(s.response)} |"
            )
        lines.append("")
    return "\n".join(lines)


def filter_report(total: list[dict], kept: list[dict], rejected: list[dict], stats: dict) -> str:
    lines = [
        "# SFT data filtering",
        "",
        f"kept **{len(kept)} / {len(total)}** traces ({stats['retention']:.1%})",
        "",
        f"mean response length (chars): before {stats['mean_len_before']:.1f}, after {stats['mean_len_after']:.1f}",
        "",
        "| group | kept | total |",
        "|---|---|---|",
    ]
    for key, (k, t) in sorted(stats["by_group"].items()):
        lines.append(f"| {md_cell(key)} | {k} | {t} |")
    lines += ["", "## Rejected examples", "", "| id | status | extracted | ground truth |", "|---|---|---|---|"]
    for r in rejected[:8]:
        lines.append(
            f"| {md_cell(r['unique_id'], 60)} | {md_cell(r['status'])} | {md_cell(r['extracted'], 40)} "
            f"| {md_cell(r['ground_truth'], 40)} |"
        )
    return "\n".join(lines) + "\n"


def _round_line(r: dict) -> str:
    head = (
        f"| {r['round']:.0f}{' (initial policy)' if r['round'] == 0 else ''} | {r['eval/accuracy']:.3f} "
        f"({r['eval/accuracy_lo']:.3f}–{r['eval/accuracy_hi']:.3f}) | {r['eval/format_rate']:.3f} "
        f"| {r['eval/entropy']:.3f} |"
    )
    if r["round"] == 0:
        return head + " |" * 8
    return head + (
        f" {r['count/rollouts']:.0f} | {r['count/correct']:.0f} | {r['count/kept']:.0f} | {r['rollout/retention']:.1%} "
        f"| {r['rollout/share_zero_correct']:.1%} | {r['rollout/share_all_correct']:.1%} "
        f"| {r['count/duplicates_removed']:.0f} | {r['count/removed_by_cap']:.0f} |"
    )


def ei_report(run: str, history: list[dict], report: dict) -> str:
    """The report of one Expert Iteration round: every round so far (history rows, round 0 = the initial
    policy), then this round's data details (`report`, from `a5core.rl.ei.round_report`)."""
    k = int(history[-1]["round"])
    lines = [
        f"# Expert Iteration: {md_cell(run)}, round {k}",
        "",
        "| round | accuracy (95% CI) | format rate | entropy | rollouts | correct | kept | retention "
        "| zero-correct questions | all-correct questions | duplicates removed | removed by cap |",
        "|---" * 12 + "|",
    ]
    lines += [_round_line(r) for r in history]
    lines += [
        "",
        f"## Round {k}" + ("" if report["trained"] else " (not trained: no correct rollout)"),
        "",
        f"- questions by number of correct samples: {json.dumps(report['success_counts'], sort_keys=True)}",
        f"- kept by subject: {md_cell(json.dumps(report['kept_by_subject'], sort_keys=True), 2000)}; by level: "
        f"{md_cell(json.dumps(report['kept_by_level'], sort_keys=True), 2000)}",
        f"- mean response length (tokens): kept {report['rollout/response_tokens_kept']:.1f}, all rollouts "
        f"{report['rollout/response_tokens']:.1f}",
        f"- per-question cap {report['cap'] or 'none'}, dedup {'on' if report['dedup'] else 'off'}: "
        f"{report['count/duplicates_removed']} duplicates and {report['count/removed_by_cap']} samples over the cap "
        "removed",
    ]
    return "\n".join(lines) + "\n"
