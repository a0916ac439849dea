"""Markdown reports written by stages (case analysis of an evaluation, SFT-data filtering)."""
from __future__ import annotations

import json


def _clip(s: str | None, n: int = 300) -> str:
    s = (s or "").replace("\n", " ").replace("|", "\\|")
    return s if len(s) <= n else s[:n] + " …"


def eval_case_report(title: str, records: list[dict], metrics: dict, per_category: int = 3) -> str:
    """Examples of each handout category with their grading status, so model and parser errors can be told apart."""
    lines = [f"# {title}", "", f"accuracy **{metrics['accuracy']:.3f}**, format rate **{metrics['format_rate']:.3f}** "
             f"over {metrics['n']} generations", "", "| category | count |", "|---|---|",
             f"| format 1, answer 1 | {metrics['format1_answer1']} |", f"| format 1, answer 0 | {metrics['format1_answer0']} |",
             f"| format 0, answer 0 | {metrics['format0_answer0']} |", "", "Grading status counts (parse failures vs wrong answers): "
             + json.dumps(metrics["status_counts"]), ""]
    cats = {"format 1, answer 1": lambda r: r["format_reward"] == 1 and r["answer_reward"] == 1,
            "format 1, answer 0": lambda r: r["format_reward"] == 1 and r["answer_reward"] == 0,
            "format 0, answer 0": lambda r: r["format_reward"] == 0}
    for name, pred in cats.items():
        lines += [f"## {name}", "", "| id | status | extracted | ground truth | response |", "|---|---|---|---|---|"]
        for r in [r for r in records if pred(r)][:per_category]:
            lines.append(f"| {r['unique_id']} | {r['status']} | {_clip(r['extracted'], 40)} | {_clip(r['ground_truth'], 40)} | {_clip(r['response'])} |")
        lines.append("")
    return "\n".join(lines)


def filter_report(total: list[dict], kept: list[dict], rejected: list[dict], stats: dict) -> str:
    lines = ["# SFT data filtering", "", f"kept **{len(kept)} / {len(total)}** traces ({stats['retention']:.1%})", "",
             f"mean response length (chars): before {stats['mean_len_before']:.1f}, after {stats['mean_len_after']:.1f}", "",
             "| group | kept | total |", "|---|---|---|"]
    for key, (k, t) in sorted(stats["by_group"].items()):
        lines.append(f"| {key} | {k} | {t} |")
    lines += ["", "## Rejected examples", "", "| id | status | extracted | ground truth |", "|---|---|---|---|"]
    for r in rejected[:8]:
        lines.append(f"| {r['unique_id']} | {r['status']} | {_clip(r['extracted'], 40)} | {_clip(r['ground_truth'], 40)} |")
    return "\n".join(lines) + "\n"


def ei_report(run: str, reports: list[dict]) -> str:
    """One row per Expert Iteration round (round 0 = the initial policy), then each round's data details."""
    lines = [f"# Expert Iteration: {run}", "", "| round | accuracy | format rate | entropy | rollouts | correct | kept | retention "
             "| zero-correct questions | all-correct questions | duplicates removed | removed by cap |", "|---" * 12 + "|"]
    for r in reports:
        if r["round"] == 0:
            lines.append(f"| 0 (initial policy) | {r['accuracy']:.3f} | {r['format_rate']:.3f} | {r['mean_token_entropy']:.3f} |" + " |" * 8)
            continue
        lines.append(f"| {r['round']} | {r['accuracy']:.3f} | {r['format_rate']:.3f} | {r['mean_token_entropy']:.3f} | {r['rollouts']} "
                     f"| {r['correct']} | {r['kept']} | {r['retention']:.1%} | {r['share_zero_correct']:.1%} | {r['share_all_correct']:.1%} "
                     f"| {r['duplicates_removed']} | {r['removed_by_cap']} |")
    for r in reports[1:]:
        lines += ["", f"## Round {r['round']}" + ("" if r["trained"] else " (not trained: no correct rollout)"), "",
                  f"- questions by number of correct samples: {json.dumps(r['success_counts'], sort_keys=True)}",
                  f"- kept by subject: {json.dumps(r['kept_by_subject'], sort_keys=True)}; by level: {json.dumps(r['kept_by_level'], sort_keys=True)}",
                  f"- mean response length (tokens): kept {r['mean_length_kept']:.1f}, all rollouts {r['mean_length_all']:.1f}"]
    return "\n".join(lines) + "\n"
