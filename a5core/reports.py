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


def ei_report(run: str, history: list[dict], report: dict) -> str:
    """The report of one Expert Iteration round: every round so far (history rows, round 0 = the initial
    policy), then this round's data details (`report`, from `a5core.ei.round_report`)."""
    k = int(history[-1]["round"])
    lines = [f"# Expert Iteration: {run}, round {k}", "", "| round | accuracy | format rate | entropy | rollouts | correct | kept | retention "
             "| zero-correct questions | all-correct questions | duplicates removed | removed by cap |", "|---" * 12 + "|"]
    for r in history:
        head = f"| {r['round']:.0f}{' (initial policy)' if r['round'] == 0 else ''} | {r['accuracy']:.3f} | {r['format_rate']:.3f} | {r['mean_token_entropy']:.3f} |"
        if r["round"] == 0:
            lines.append(head + " |" * 8)
            continue
        lines.append(head + f" {r['rollouts']:.0f} | {r['correct']:.0f} | {r['kept']:.0f} | {r['retention']:.1%} | {r['share_zero_correct']:.1%} "
                     f"| {r['share_all_correct']:.1%} | {r['duplicates_removed']:.0f} | {r['removed_by_cap']:.0f} |")
    lines += ["", f"## Round {k}" + ("" if report["trained"] else " (not trained: no correct rollout)"), "",
              f"- questions by number of correct samples: {json.dumps(report['success_counts'], sort_keys=True)}",
              f"- kept by subject: {json.dumps(report['kept_by_subject'], sort_keys=True)}; by level: {json.dumps(report['kept_by_level'], sort_keys=True)}",
              f"- mean response length (tokens): kept {report['mean_length_kept']:.1f}, all rollouts {report['mean_length_all']:.1f}",
              f"- per-question cap {report['cap'] or 'none'}, dedup {'on' if report['dedup'] else 'off'}: {report['duplicates_removed']} "
              f"duplicates and {report['removed_by_cap']} samples over the cap removed"]
    return "\n".join(lines) + "\n"
