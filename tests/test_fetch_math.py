"""tools/fetch_math.py through the pinned `datasets`, on local copies of the two Hub repositories in their layout
(README.md `configs:` and parquet files per config and split): the hub is not reachable here."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from a5core.data import adapters
from tools import fetch_math


def _repo(folder: Path, files: dict[str, list[dict]], configs: dict[str, dict[str, str]]) -> None:
    """A dataset repository: parquet shards and the card's `configs:` mapping each config's splits to them."""
    for path, rows in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), folder / path)
    card = ["---", "configs:"]
    for config, splits in configs.items():
        card += [f"- config_name: {config}", "  data_files:"]
        card += [f"  - split: {split}\n    path: {pattern}" for split, pattern in splits.items()]
    (folder / "README.md").write_text("\n".join([*card, "---", "# fixture", ""]))


def _math(root: Path) -> None:
    files, configs = {}, {}
    for config in fetch_math.MATH_CONFIGS:
        for split in ("train", "test"):
            files[f"{config}/{split}-00000-of-00001.parquet"] = [
                {"problem": f"{config} {split} {i}+1?", "level": "Level 2", "type": config.title(), "solution": s}
                for i, s in enumerate([f"So $\\boxed{{{split}}}$.", "no box here"])
            ]
        configs[config] = {split: f"{config}/{split}-*" for split in ("train", "test")}
    _repo(root / fetch_math.MATH[0], files, configs)


def _traces(root: Path) -> None:
    rows = [
        {
            "problem": "What is 3+4?",
            "solution": "7",
            "answer": "7",
            "uuid": "u1",
            "generations": ["<think>bad</think> 8", "<think>\n3 + 4 = 7.\n</think>\n\nSo \\boxed{7}."],
            "correctness_math_verify": [False, True],
        },
        {
            "problem": "Hard?",
            "solution": "",
            "answer": "1",
            "uuid": "u2",
            "generations": ["<think>x</think>"],
            "correctness_math_verify": [False],
        },
    ]
    files = {"data/train-00000-of-00002.parquet": rows[:1], "data/train-00001-of-00002.parquet": rows[1:]}
    _repo(root / fetch_math.TRACES[0], files, {fetch_math.TRACES[1]: {"train": "data/train-*"}})


def test_fetch_math_runs_through_datasets_on_a_local_copy_of_the_hub(tmp_path, monkeypatch):
    import datasets

    assert datasets.__version__ == "5.2.0"  # the version requirements/*.lock pin
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _math(tmp_path / "hub")
    _traces(tmp_path / "hub")
    out = tmp_path / "math"
    fetch_math.main(["--out", str(out), "--source-dir", str(tmp_path / "hub")])
    train = adapters.load_problems(f"jsonl:{out / 'train.jsonl'}")
    assert len(train) == 7  # one boxed solution per subject; the unboxed one has no answer and is dropped
    assert train[0] == {**train[0], "answer": "train", "subject": "Algebra", "level": "Level 2"}
    first = json.loads((out / "validation.jsonl").read_text().splitlines()[0])
    assert first["unique_id"] == "test/algebra/0.json" and first["answer"] == "test"
    [sft] = adapters.load_sft(f"jsonl:{out / 'sft.jsonl'}")
    assert sft["response"] == " 3 + 4 = 7. </think> <answer>7</answer>" and sft["ground_truth"] == "7"


def test_a_missing_local_copy_is_named(tmp_path):
    with pytest.raises(SystemExit, match="has no .*EleutherAI/hendrycks_math"):
        fetch_math.main(["--out", str(tmp_path / "m"), "--source-dir", str(tmp_path)])
