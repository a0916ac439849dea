"""`prepare_math`: resolve the data params into train / validation / SFT rows.

Validation is kept apart from everything: a training or SFT problem whose text equals a validation problem's is
dropped. Training problems that also have an SFT trace stay in the EI/GRPO pool, as in the handout (which uses all
of MATH train), unless `data.exclude_sft_problems`. Every ground truth must be gradable: one the grader cannot screen
and normalize fails the stage with its row id, instead of silently never matching.
`data.validation_subset` selects a named set of validation problems shipped with the package (`math500.json`:
MATH-500's ids and problem-text hashes), matched by unique_id or by problem text, so it needs no hub; every one of
its problems must be found.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from pathlib import Path

from a5core.config.prompts import build_prompt
from a5core.config.sections import DataConfig
from a5core.data import adapters, synthetic


def _sft_row_from_synthetic(r: dict) -> dict:
    return {
        "unique_id": r["unique_id"],
        "prompt": build_prompt(r["problem"], "r1_zero"),
        "response": r["response"],
        "ground_truth": r["answer"],
        "subject": r["subject"],
        "level": r["level"],
        "source": r["source"],
    }


def _problem_of_prompt(prompt: str) -> str:
    """The question inside an r1_zero prompt (for overlap checks of SFT data)."""
    if "\nUser: " in prompt:
        return prompt.split("\nUser: ", 1)[1].rsplit("\nAssistant:", 1)[0]
    return prompt


def prepare(cfg: DataConfig) -> tuple[dict[str, list[dict]], dict]:
    """Returns ({"train", "validation", "sft"} rows, a report of counts and removed overlaps)."""
    if cfg.source == "synthetic":
        data = synthetic.generate(
            cfg.n_train, cfg.n_validation, cfg.n_sft, cfg.teacher_error_rate, cfg.seed, cfg.max_level
        )
        train, validation = data["train"], data["validation"]
        sft = [_sft_row_from_synthetic(r) for r in data["sft"]]
    else:
        problems = adapters.load_problems(cfg.source)
        if cfg.validation_source:
            validation = adapters.load_problems(cfg.validation_source)
            train, validation = problems, named_subset(validation, cfg.validation_subset, cfg.validation_source)
        else:
            random.Random(cfg.seed).shuffle(problems)
            validation, train = problems[: cfg.n_validation], problems[cfg.n_validation :]
        train = seeded_subset(train, cfg.n_train, cfg.seed)
        validation = seeded_subset(validation, cfg.n_validation, cfg.seed)
        sft = []
    if cfg.sft_source != "synthetic":
        sft = adapters.load_sft(cfg.sft_source)
    check_ground_truths(train, "answer", cfg.source)
    check_ground_truths(validation, "answer", cfg.validation_source or cfg.source)
    check_ground_truths(sft, "ground_truth", cfg.sft_source)
    return drop_overlaps(train, validation, sft, exclude_sft_problems=cfg.exclude_sft_problems)


SUBSETS = {"math500": "math500.json"}  # data.validation_subset -> its file beside this module


@functools.cache
def subset_spec(name: str) -> dict:
    """{"name", "about", "problems": [{"unique_id", "sha256"}]} of a named validation subset."""
    return json.loads(Path(__file__).with_name(SUBSETS[name]).read_text())


def _problem_sha(text: str) -> str:
    return hashlib.sha256(synthetic.normalize_problem(text).encode()).hexdigest()


def named_subset(rows: list[dict], name: str, label: str) -> list[dict]:
    """The rows of the named subset (SUBSETS; "" keeps all), one per problem, matched by unique_id or by problem
    text (its sha256 after `normalize_problem`), in file order. A problem of the subset not found is an error."""
    if not name:
        return rows
    spec = subset_spec(name)
    by_hash = {p["sha256"]: p["unique_id"] for p in spec["problems"]}
    ids = set(by_hash.values())
    chosen: dict[str, dict] = {}
    for r in rows:
        match = r["unique_id"] if r["unique_id"] in ids else by_hash.get(_problem_sha(r["problem"]))
        if match:
            chosen.setdefault(match, r)
    if missing := sorted(ids - chosen.keys()):
        raise adapters.DataError(
            f"{label}: {len(missing)} of the {len(ids)} {spec['name']} problems are not in it (e.g. {missing[:3]}); "
            f"data.validation_subset={name} needs the MATH test split (python -m tools.fetch_math)"
        )
    return list(chosen.values())


def seeded_subset(rows: list[dict], n: int, seed: int) -> list[dict]:
    """`n` rows drawn with `seed`, in file order (0 or n >= len: all): not the first n, which may all be one subject."""
    if not n or n >= len(rows):
        return rows
    keep = sorted(random.Random(seed).sample(range(len(rows)), n))
    return [rows[i] for i in keep]


def check_ground_truths(rows: list[dict], field: str, source: str) -> None:
    """Every row's ground truth must pass the grader's screen and normalization; else fail naming the row."""
    from a5core.grader import check_ground_truth

    for r in rows:
        try:
            check_ground_truth(r[field])
        except ValueError as err:
            raise adapters.DataError(
                f"{source}: row {r['unique_id']!r}: {field} {r[field]!r} cannot be graded ({err})"
            ) from None


def drop_overlaps(
    train: list[dict], validation: list[dict], sft: list[dict], exclude_sft_problems: bool = False
) -> tuple[dict[str, list[dict]], dict]:
    """Validation problems are removed from SFT and train; SFT problems from train only if `exclude_sft_problems`."""
    key = synthetic.normalize_problem
    val_keys = {key(r["problem"]) for r in validation}
    sft_kept = [r for r in sft if key(_problem_of_prompt(r["prompt"])) not in val_keys]
    sft_keys = {key(_problem_of_prompt(r["prompt"])) for r in sft_kept} if exclude_sft_problems else set()
    train_kept = [r for r in train if key(r["problem"]) not in val_keys | sft_keys]
    report = {
        "train": len(train_kept),
        "validation": len(validation),
        "sft": len(sft_kept),
        "removed_from_train": len(train) - len(train_kept),
        "removed_from_sft": len(sft) - len(sft_kept),
    }
    return {"train": train_kept, "validation": validation, "sft": sft_kept}, report
