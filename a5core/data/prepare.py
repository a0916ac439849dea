"""`prepare_math`: resolve the data params into train / validation / SFT rows (disjoint by problem text)."""
from __future__ import annotations

import random

from a5core.config import DataConfig
from a5core.data import adapters, synthetic
from a5core.prompts import build_prompt


def _sft_row_from_synthetic(r: dict) -> dict:
    return {"unique_id": r["unique_id"], "prompt": build_prompt(r["problem"], "r1_zero"), "response": r["response"],
            "ground_truth": r["answer"], "subject": r["subject"], "level": r["level"], "source": r["source"]}


def _problem_of_prompt(prompt: str) -> str:
    """The question inside an r1_zero prompt (for overlap checks of SFT data)."""
    if "\nUser: " in prompt:
        return prompt.split("\nUser: ", 1)[1].rsplit("\nAssistant:", 1)[0]
    return prompt


def prepare(cfg: DataConfig) -> tuple[dict[str, list[dict]], dict]:
    """Returns ({"train", "validation", "sft"} rows, a report of counts and removed overlaps)."""
    if cfg.source == "synthetic":
        data = synthetic.generate(cfg.n_train, cfg.n_validation, cfg.n_sft, cfg.teacher_error_rate, cfg.seed, cfg.max_level)
        train, validation = data["train"], data["validation"]
        sft = [_sft_row_from_synthetic(r) for r in data["sft"]]
    else:
        problems = adapters.load_problems(cfg.source)
        if cfg.validation_source:
            train, validation = problems, adapters.load_problems(cfg.validation_source)
        else:
            random.Random(cfg.seed).shuffle(problems)
            validation, train = problems[: cfg.n_validation], problems[cfg.n_validation :]
        train = train[: cfg.n_train] if cfg.n_train else train
        validation = validation[: cfg.n_validation] if cfg.n_validation else validation
        sft = []
    if cfg.sft_source != "synthetic":
        sft = adapters.load_sft(cfg.sft_source)
    elif cfg.source != "synthetic":
        raise ValueError("data.sft_source=synthetic needs data.source=synthetic; give jsonl:/parquet: SFT traces")
    return drop_overlaps(train, validation, sft)


def drop_overlaps(train: list[dict], validation: list[dict], sft: list[dict]) -> tuple[dict[str, list[dict]], dict]:
    """Validation wins over SFT, SFT over train: an overlapping problem is removed from the later split."""
    key = synthetic.normalize_problem
    val_keys = {key(r["problem"]) for r in validation}
    sft_kept = [r for r in sft if key(_problem_of_prompt(r["prompt"])) not in val_keys]
    sft_keys = {key(_problem_of_prompt(r["prompt"])) for r in sft_kept}
    train_kept = [r for r in train if key(r["problem"]) not in val_keys | sft_keys]
    report = {"train": len(train_kept), "validation": len(validation), "sft": len(sft_kept),
              "removed_from_train": len(train) - len(train_kept), "removed_from_sft": len(sft) - len(sft_kept)}
    return {"train": train_kept, "validation": validation, "sft": sft_kept}, report
