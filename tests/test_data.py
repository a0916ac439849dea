import json
import os

import pytest

from a5core.base.artifacts import read_parquet, read_provenance, write_parquet
from a5core.config.sections import ConfigError, DataConfig, from_dict
from a5core.data import adapters, synthetic
from a5core.data.prepare import prepare
from a5core.grader import grade


def test_synthetic_deterministic_disjoint_and_teacher_error_rate():
    a = synthetic.generate(300, 100, 600, 0.3, seed=1)
    b = synthetic.generate(300, 100, 600, 0.3, seed=1)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    keys = {s: {synthetic.normalize_problem(r["problem"]) for r in a[s]} for s in a}
    assert (
        not keys["train"] & keys["validation"]
        and not keys["train"] & keys["sft"]
        and not keys["sft"] & keys["validation"]
    )
    wrong = sum(grade(r["response"], r["answer"]).reward == 0 for r in a["sft"]) / len(a["sft"])
    assert 0.24 < wrong < 0.36
    assert all(
        grade(
            r["solution"].replace("The answer is $\\boxed{", "</think> <answer>").replace("}$.", "</answer>"),
            r["answer"],
        ).reward
        == 1
        for r in a["validation"][:50]
    )
    assert {r["subject"] for r in a["train"]} == set(synthetic.SUBJECTS)


def test_prepare_synthetic_counts():
    splits, report = prepare(DataConfig(n_train=20, n_validation=5, n_sft=10))
    assert (report["train"], report["validation"], report["sft"]) == (20, 5, 10)
    assert splits["sft"][0]["prompt"].endswith("Assistant: <think>")


def _write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return f"jsonl:{p}"


BAD_FILES = [  # (file bytes, expected message): every reader error names the file and the line
    (b'{"problem": "x", "answer": "1"}\n\xff\xfe{"problem": "y"}\n', r"m.jsonl:2: not valid UTF-8"),
    (b'{"problem": "x", "answer": [1, 2]}\n', r"m.jsonl:1: field 'answer' must be a number or a string, got list"),
    (b'{"problem": "x", "answer": {"a": 1}}\n', r"m.jsonl:1: field 'answer' must be a number or a string, got dict"),
    (b'{"problem": "x", "answer": true}\n', r"m.jsonl:1: field 'answer' must be a number or a string, got bool"),
    (b'{"problem": "x", "answer": NaN}\n', r"m.jsonl:1: field 'answer' is nan"),
    (b'{"problem": "x", "answer": Infinity}\n', r"m.jsonl:1: field 'answer' is inf"),
    (b'{"problem": 5, "answer": "1"}\n', r"m.jsonl:1: field 'problem' must be a string"),
    (
        b'{"problem": "x", "answer": "1", "unique_id": ["a"]}\n',
        r"m.jsonl:1: field 'unique_id' must be a string or an integer",
    ),
    (b'{"problem": "' + b"x" * 20_001 + b'", "answer": "1"}\n', r"m.jsonl:1: field 'problem' has 20001 characters"),
]


@pytest.mark.parametrize("content,match", BAD_FILES)
def test_bad_data_files_are_clear_errors(tmp_path, content, match):
    (tmp_path / "m.jsonl").write_bytes(content)
    with pytest.raises(adapters.DataError, match=match):
        adapters.load_problems(f"jsonl:{tmp_path / 'm.jsonl'}")


def test_a_folder_or_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(adapters.DataError, match="not a file"):
        adapters.load_problems(f"jsonl:{tmp_path}")
    with pytest.raises(adapters.DataError, match="no such file"):
        adapters.load_problems(f"parquet:{tmp_path / 'nope.parquet'}")
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(adapters.DataError, match="not a readable Parquet file"):
        adapters.load_problems(f"parquet:{tmp_path / 'x.parquet'}")


def test_numbers_become_canonical_answers_and_sft_needs_a_ground_truth(tmp_path):
    spec = _write(
        tmp_path,
        "n.jsonl",
        [
            json.dumps({"problem": f"p{i}", "answer": a, "unique_id": str(i)})
            for i, a in enumerate([3, 3.0, 0.5, -12, 1e20])
        ],
    )
    assert [r["answer"] for r in adapters.load_problems(spec)] == ["3", "3", "0.5", "-12", "1e+20"]
    spec = _write(tmp_path, "s.jsonl", [json.dumps({"prompt": "p", "response": "no answer here"})])
    with pytest.raises(adapters.DataError, match="s.jsonl:1: no ground truth"):
        adapters.load_sft(spec)


def test_ungradable_ground_truth_fails_prepare_with_the_row_id(tmp_path):
    bad = _write(tmp_path, "v.jsonl", [json.dumps({"problem": "p", "answer": "x" * 500, "unique_id": "row-7"})])
    good = _write(tmp_path, "t.jsonl", [json.dumps({"problem": "q", "answer": "2", "unique_id": "t1"})])
    sft = _write(tmp_path, "s.jsonl", [json.dumps({"prompt": "r", "response": "</think> <answer>2</answer>"})])
    cfg = DataConfig(source=good, validation_source=bad, sft_source=sft, n_train=0, n_validation=0)
    with pytest.raises(adapters.DataError, match="row 'row-7': answer"):
        prepare(cfg)


def test_sft_problems_stay_in_the_rl_pool_unless_excluded(tmp_path):
    from a5core.config.prompts import build_prompt

    train = _write(
        tmp_path,
        "t.jsonl",
        [json.dumps({"problem": f"What is {i}+{i}?", "answer": str(2 * i), "unique_id": f"t{i}"}) for i in range(4)],
    )
    val = _write(tmp_path, "v.jsonl", [json.dumps({"problem": "What is 9+9?", "answer": "18", "unique_id": "v"})])
    sft = _write(
        tmp_path,
        "s.jsonl",
        [
            json.dumps({"prompt": build_prompt("What is 1+1?"), "response": "</think> <answer>2</answer>"}),
            json.dumps({"prompt": build_prompt("What is 9+9?"), "response": "</think> <answer>18</answer>"}),
        ],
    )
    cfg = DataConfig(source=train, validation_source=val, sft_source=sft, n_train=0, n_validation=0)
    splits, report = prepare(cfg)
    assert len(splits["train"]) == 4 and report["removed_from_sft"] == 1  # validation never leaks into SFT
    splits, _ = prepare(DataConfig(**{**cfg.__dict__, "exclude_sft_problems": True}))
    assert [r["unique_id"] for r in splits["train"]] == ["t0", "t2", "t3"]


def test_validation_subset_is_seeded_not_the_first_rows(tmp_path):
    rows = [json.dumps({"problem": f"p{i}", "answer": str(i), "unique_id": f"v{i}"}) for i in range(50)]
    val = _write(tmp_path, "v.jsonl", rows)
    train = _write(tmp_path, "t.jsonl", [json.dumps({"problem": "q", "answer": "1", "unique_id": "t"})])
    sft = _write(tmp_path, "s.jsonl", [json.dumps({"prompt": "r", "response": "</think> <answer>2</answer>"})])
    splits, _ = prepare(DataConfig(source=train, validation_source=val, sft_source=sft, n_train=0, n_validation=10))
    ids = [r["unique_id"] for r in splits["validation"]]
    assert len(ids) == 10 and ids != [f"v{i}" for i in range(10)] and ids == sorted(ids, key=lambda u: int(u[1:]))


def test_math_gsm8k_and_sft_formats(tmp_path):
    spec = _write(
        tmp_path,
        "m.jsonl",
        [
            json.dumps(
                {
                    "problem": "1+1?",
                    "solution": "It is $\\boxed{2}$.",
                    "type": "Algebra",
                    "level": "Level 1",
                    "unique_id": "a",
                }
            )
        ],
    )
    assert adapters.load_problems(spec)[0]["answer"] == "2"
    spec = _write(tmp_path, "g.jsonl", [json.dumps({"question": "2+2?", "answer": "2+2=4\n#### 1,004"})])
    assert adapters.load_problems(spec)[0]["answer"] == "1004"
    spec = _write(tmp_path, "s.jsonl", [json.dumps({"prompt": "p", "response": "r </think> <answer>7</answer>"})])
    assert adapters.load_sft(spec)[0]["ground_truth"] == "7"


@pytest.mark.parametrize(
    "lines,match",
    [
        (['{"problem": "x"'], r"m.jsonl:1: malformed JSON"),
        (['{"problem": "x", "solution": "no box"}'], r"m.jsonl:1: empty field 'answer'"),
        (['{"solution": "\\\\boxed{1}"}'], r"m.jsonl:1: missing or empty field 'problem'"),
        (['{"question": "q", "answer": "no hashes"}'], r"m.jsonl:1: field 'answer' has no '####"),
        (
            ['{"problem": "a", "answer": "1", "unique_id": "x"}', '{"problem": "b", "answer": "2", "unique_id": "x"}'],
            "duplicate unique_id 'x'",
        ),
        (["[1, 2]"], "expected a JSON object"),
    ],
)
def test_bad_input_names_file_line_field(tmp_path, lines, match):
    with pytest.raises(adapters.DataError, match=match):
        adapters.load_problems(_write(tmp_path, "m.jsonl", lines))


def test_parquet_provenance_and_schema_check(tmp_path):
    p = write_parquet([{"a": "1"}], tmp_path / "x.parquet", {"stage": "t", "params": {"k": 1}})
    assert read_provenance(p)["params"] == {"k": 1}
    with pytest.raises(ValueError, match="missing columns"):
        read_parquet(p, ["a", "b"])
    write_parquet([{"a": "1"}], tmp_path / "y.parquet")
    with pytest.raises(ValueError, match="no a5 provenance"):
        read_provenance(tmp_path / "y.parquet")
    assert not list(tmp_path.glob(".*"))  # no temp files left behind


def test_config_rejects_unknown_and_bad_values():
    with pytest.raises(ConfigError, match="unknown key"):
        from_dict(DataConfig, {"n_trian": 5}, "data")
    with pytest.raises(ConfigError, match="expected int"):
        from_dict(DataConfig, {"n_train": "many"}, "data")
    with pytest.raises(ConfigError, match="teacher_error_rate"):
        from_dict(DataConfig, {"teacher_error_rate": 2.0}, "data")


def test_hf_dataset_source_through_a_fake_datasets_module(monkeypatch):
    """No hub here: a stand-in `datasets` module checks what `hf:` asks for and feeds MATH / GSM8K records."""
    import sys
    import types

    from a5core.data import adapters

    calls = []
    fake = {
        ("hendrycks/competition_math", None, "test"): [
            {"problem": "What is $1+1$?", "solution": "So $\\boxed{2}$.", "type": "Algebra", "level": "Level 1"}
        ],
        ("gsm8k", "main", "train"): [
            {"question": "Tom has 3 apples and eats 1. How many are left?", "answer": "3 - 1 = 2\n#### 2"}
        ],
    }
    mod = types.ModuleType("datasets")
    mod.load_dataset = lambda name, config, split, revision=None: (
        calls.append((name, config, split, revision)) or fake[(name, config, split)]
    )
    monkeypatch.setitem(sys.modules, "datasets", mod)
    math_rows = adapters.load_problems("hf:hendrycks/competition_math:test@0bd4da3")
    gsm_rows = adapters.load_problems("hf:gsm8k:main:train")
    assert calls == [("hendrycks/competition_math", None, "test", "0bd4da3"), ("gsm8k", "main", "train", None)]
    assert (math_rows[0]["answer"], math_rows[0]["subject"], math_rows[0]["level"]) == ("2", "Algebra", "Level 1")
    assert gsm_rows[0]["answer"] == "2"
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed: a clear error, not an ImportError trace
    with pytest.raises(adapters.DataError, match=r"pip install -e '\.\[data\]'"):
        adapters.load_problems("hf:gsm8k:main:train")


def test_hf_model_source_records_the_resolved_revision(tmp_path, monkeypatch):
    """`hf:<repo>@<rev>` through a stand-in snapshot_download: the snapshot is copied and its commit recorded."""
    import huggingface_hub

    from a5core.config.sections import ModelConfig
    from a5core.model.loading import build_tiny_model, fetch_model

    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "hub" / "snapshots" / commit
    model, tok = build_tiny_model()
    model.save_pretrained(snapshot)
    tok.save_pretrained(snapshot)
    calls = []
    monkeypatch.setattr(
        huggingface_hub,
        "snapshot_download",
        lambda repo, revision=None, allow_patterns=None: (
            calls.append((repo, revision, allow_patterns)) or str(snapshot)
        ),
    )
    record = fetch_model(ModelConfig(source="hf:org/tiny-math@v1.0"), tmp_path / "models" / "base")
    assert record == {"source": "hf:org/tiny-math@v1.0", "repo": "org/tiny-math", "revision": commit}
    assert calls[0][:2] == ("org/tiny-math", "v1.0") and "*.safetensors" in calls[0][2]
    assert (tmp_path / "models" / "base" / "model.safetensors").exists()
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["base"]  # built beside, then renamed: no temp left


def test_hash_path_sees_every_change_to_a_folder(tmp_path):
    from a5core.base.artifacts import hash_path

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "w.bin").write_bytes(b"abc")
    first = hash_path(tmp_path / "m")
    assert hash_path(tmp_path / "m") == first  # (served from the cache the second time)
    (tmp_path / "m" / "w.bin").write_bytes(b"abd")  # same size, new content and mtime
    second = hash_path(tmp_path / "m")
    assert second != first
    (tmp_path / "m" / "w.bin").rename(tmp_path / "m" / "v.bin")
    assert hash_path(tmp_path / "m") not in (first, second)


def test_gguf_parsed_once_memoizes_while_loading_and_restores(tmp_path):
    import gguf
    import numpy as np

    from a5core.model.loading import gguf_parsed_once

    path = tmp_path / "t.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_tensor("token_embd.weight", np.ones((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    originals = gguf.GGUFReader, gguf.get_tensor_name_map
    with gguf_parsed_once():
        reader = gguf.GGUFReader(path)
        assert gguf.GGUFReader(path) is reader and reader.tensors[0].name == "token_embd.weight"
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == originals
    assert gguf.GGUFReader(path) is not gguf.GGUFReader(path)


MATH500_FIRST = (  # MATH-500's first problem (test/precalculus/807.json), as the MATH test split writes it
    "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.  Enter your answer in the form "
    "$(r,\\theta),$ where $r > 0$ and $0 \\le \\theta < 2 \\pi.$"
)


def test_math500_ids_match_the_dataset_card():
    """HuggingFaceH4/MATH-500's card: 500 problems; by subject Algebra 124, Intermediate Algebra 97, Prealgebra 82,
    Number Theory 62, Precalculus 56, Geometry 41, Counting & Probability 38 (the ids name the subject's folder)."""
    from collections import Counter

    from a5core.data.prepare import subset_spec

    problems = subset_spec("math500")["problems"]
    assert len({p["unique_id"] for p in problems}) == len({p["sha256"] for p in problems}) == 500
    assert Counter(p["unique_id"].split("/")[1] for p in problems) == {
        "algebra": 124, "intermediate_algebra": 97, "prealgebra": 82, "number_theory": 62, "precalculus": 56,
        "geometry": 41, "counting_and_probability": 38,
    }  # fmt: skip


def _math_row(uid: str, problem: str) -> str:
    return json.dumps({"problem": problem, "solution": "$\\boxed{1}$", "answer": "1", "unique_id": uid}) + "\n"


def test_math500_is_selected_by_id_or_by_problem_text_and_a_missing_problem_is_an_error(tmp_path):
    from a5core.data.prepare import subset_spec
    from a5core.report.summary import validation_set

    ids = [p["unique_id"] for p in subset_spec("math500")["problems"]]
    lines = [_math_row(f"test/other/{i}.json", f"Compute ${i} + 1 - {i}$.") for i in range(30)]
    lines += [_math_row("test/precalculus/0.json", MATH500_FIRST)]  # another numbering: matched by its text
    lines += [_math_row(uid, f"Problem {uid}: compute $1$.") for uid in ids[1:]]  # by id
    (tmp_path / "test.jsonl").write_text("".join(lines))
    (tmp_path / "train.jsonl").write_text(_math_row("train/a.json", "Compute $2 - 1$."))
    (tmp_path / "sft.jsonl").write_text(json.dumps({"prompt": "p", "response": "r", "ground_truth": "1"}) + "\n")
    data = {"source": f"jsonl:{tmp_path}/train.jsonl", "sft_source": f"jsonl:{tmp_path}/sft.jsonl", "n_train": 0}
    cfg = from_dict(
        DataConfig, {**data, "validation_source": f"jsonl:{tmp_path}/test.jsonl", "validation_subset": "math500",
                     "n_validation": 0}, "data",
    )  # fmt: skip
    rows = prepare(cfg)[0]["validation"]
    assert len(rows) == 500 and rows[0]["unique_id"] == "test/precalculus/0.json"
    assert validation_set(cfg) == f"the math500 subset of jsonl:{tmp_path}/test.jsonl"
    (tmp_path / "test.jsonl").write_text("".join(lines[:-1]))
    with pytest.raises(adapters.DataError, match=f"1 of the 500 MATH-500 problems are not in it .*{ids[-1]}"):
        prepare(cfg)
    with pytest.raises(ConfigError, match="validation_subset=math500 needs validation_source"):
        from_dict(DataConfig, {**data, "validation_subset": "math500"}, "data").validate()


def test_outputs_honour_the_umask(tmp_path):
    """Issue 58: outputs are written with the modes a plain open() and mkdir() give under the process's umask, not
    mkstemp's 0600 or mkdtemp's 0700, so a group-shared workspace and DVC cache can read them (umask 002 here)."""
    from a5core.base.artifacts import write_json, write_parquet
    from a5core.config.sections import ModelConfig
    from a5core.model.loading import fetch_model

    old = os.umask(0o002)
    try:
        write_json({"a": 1}, tmp_path / "x.json")
        write_parquet([{"a": 1}], tmp_path / "x.parquet")
        fetch_model(ModelConfig(source="random:tiny"), tmp_path / "model")
    finally:
        os.umask(old)
    assert oct((tmp_path / "x.json").stat().st_mode & 0o777) == oct(0o664)
    assert oct((tmp_path / "x.parquet").stat().st_mode & 0o777) == oct(0o664)
    assert oct((tmp_path / "model").stat().st_mode & 0o777) == oct(0o775)
    assert all(p.stat().st_mode & 0o777 == 0o664 for p in (tmp_path / "model").iterdir() if p.is_file())
