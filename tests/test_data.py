import json

import pytest

from a5core.artifacts import read_parquet, read_provenance, write_parquet
from a5core.config import ConfigError, DataConfig, from_dict
from a5core.data import adapters, synthetic
from a5core.data.prepare import prepare
from a5core.grader import grade


def test_synthetic_deterministic_disjoint_and_teacher_error_rate():
    a = synthetic.generate(300, 100, 600, 0.3, seed=1)
    b = synthetic.generate(300, 100, 600, 0.3, seed=1)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    keys = {s: {synthetic.normalize_problem(r["problem"]) for r in a[s]} for s in a}
    assert not keys["train"] & keys["validation"] and not keys["train"] & keys["sft"] and not keys["sft"] & keys["validation"]
    wrong = sum(grade(r["response"], r["answer"]).reward == 0 for r in a["sft"]) / len(a["sft"])
    assert 0.24 < wrong < 0.36
    assert all(grade(r["solution"].replace("The answer is $\\boxed{", "</think> <answer>").replace("}$.", "</answer>"), r["answer"]).reward == 1
               for r in a["validation"][:50])
    assert {r["subject"] for r in a["train"]} == set(synthetic.SUBJECTS)


def test_prepare_synthetic_counts():
    splits, report = prepare(DataConfig(n_train=20, n_validation=5, n_sft=10))
    assert (report["train"], report["validation"], report["sft"]) == (20, 5, 10)
    assert splits["sft"][0]["prompt"].endswith("Assistant: <think>")


def _write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return f"jsonl:{p}"


def test_math_gsm8k_and_sft_formats(tmp_path):
    spec = _write(tmp_path, "m.jsonl", [json.dumps({"problem": "1+1?", "solution": "It is $\\boxed{2}$.", "type": "Algebra", "level": "Level 1", "unique_id": "a"})])
    assert adapters.load_problems(spec)[0]["answer"] == "2"
    spec = _write(tmp_path, "g.jsonl", [json.dumps({"question": "2+2?", "answer": "2+2=4\n#### 1,004"})])
    assert adapters.load_problems(spec)[0]["answer"] == "1004"
    spec = _write(tmp_path, "s.jsonl", [json.dumps({"prompt": "p", "response": "r </think> <answer>7</answer>"})])
    assert adapters.load_sft(spec)[0]["ground_truth"] == "7"


@pytest.mark.parametrize("lines,match", [
    (['{"problem": "x"', ], r"m.jsonl:1: malformed JSON"),
    (['{"problem": "x", "solution": "no box"}'], r"m.jsonl:1: empty field 'answer'"),
    (['{"solution": "\\\\boxed{1}"}'], r"m.jsonl:1: missing or empty field 'problem'"),
    (['{"question": "q", "answer": "no hashes"}'], r"m.jsonl:1: field 'answer' has no '####"),
    (['{"problem": "a", "answer": "1", "unique_id": "x"}', '{"problem": "b", "answer": "2", "unique_id": "x"}'], "duplicate unique_id 'x'"),
    (['[1, 2]'], "expected a JSON object"),
])
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
    with pytest.raises(ConfigError, match="unknown keys"):
        from_dict(DataConfig, {"n_trian": 5}, "data")
    with pytest.raises(ConfigError, match="expected int"):
        from_dict(DataConfig, {"n_train": "many"}, "data")
    with pytest.raises(ConfigError, match="teacher_error_rate"):
        from_dict(DataConfig, {"teacher_error_rate": 2.0}, "data")


def test_every_profile_parses_into_the_typed_sections():
    from pathlib import Path

    import yaml

    from a5core.config import EvalConfig, GenerationConfig, ModelConfig
    from a5core.ei import EIConfig
    from a5core.grpo import GRPOConfig
    from a5core.sft import SFTConfig, SFTRun

    root = Path(__file__).resolve().parents[1]
    for f in [root / "params.yaml", *sorted((root / "profiles").glob("*.yaml"))]:
        p = yaml.safe_load(f.read_text())
        for name, cls in {"model": ModelConfig, "data": DataConfig, "generation": GenerationConfig, "eval": EvalConfig,
                          "validation": EvalConfig, "sft": SFTConfig, "ei": EIConfig, "grpo": GRPOConfig}.items():
            from_dict(cls, p[name], f"{f.name}:{name}")
        for run, over in p["grpo_runs"].items():
            from_dict(GRPOConfig, {**p["grpo"], **over}, f"{f.name}:grpo_runs.{run}")
        for run, over in p["ei_runs"].items():
            from_dict(EIConfig, {**p["ei"], **over}, f"{f.name}:ei_runs.{run}")
        for run, spec in p["sft_runs"].items():
            from_dict(SFTRun, spec, f"{f.name}:sft_runs.{run}")


def test_hf_dataset_source_through_a_fake_datasets_module(monkeypatch):
    """No hub here: a stand-in `datasets` module checks what `hf:` asks for and feeds MATH / GSM8K records."""
    import sys
    import types

    from a5core.data import adapters

    calls = []
    fake = {("hendrycks/competition_math", None, "test"): [{"problem": "What is $1+1$?", "solution": "So $\\boxed{2}$.",
                                                              "type": "Algebra", "level": "Level 1"}],
            ("gsm8k", "main", "train"): [{"question": "Tom has 3 apples and eats 1. How many are left?", "answer": "3 - 1 = 2\n#### 2"}]}
    mod = types.ModuleType("datasets")
    mod.load_dataset = lambda name, config, split: calls.append((name, config, split)) or fake[(name, config, split)]
    monkeypatch.setitem(sys.modules, "datasets", mod)
    math_rows = adapters.load_problems("hf:hendrycks/competition_math:test")
    gsm_rows = adapters.load_problems("hf:gsm8k:main:train")
    assert calls == [("hendrycks/competition_math", None, "test"), ("gsm8k", "main", "train")]
    assert (math_rows[0]["answer"], math_rows[0]["subject"], math_rows[0]["level"]) == ("2", "Algebra", "Level 1")
    assert gsm_rows[0]["answer"] == "2"
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed: a clear error, not an ImportError trace
    with pytest.raises(adapters.DataError, match=r"pip install -e '\.\[data\]'"):
        adapters.load_problems("hf:gsm8k:main:train")


def test_hf_model_source_records_the_resolved_revision(tmp_path, monkeypatch):
    """`hf:<repo>@<rev>` through a stand-in snapshot_download: the snapshot is copied and its commit recorded."""
    import huggingface_hub

    from a5core.config import ModelConfig
    from a5core.model_io import build_tiny_model, fetch_model

    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "hub" / "snapshots" / commit
    model, tok = build_tiny_model()
    model.save_pretrained(snapshot)
    tok.save_pretrained(snapshot)
    calls = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda repo, revision=None, allow_patterns=None: calls.append((repo, revision, allow_patterns)) or str(snapshot))
    record = fetch_model(ModelConfig(source="hf:org/tiny-math@v1.0"), tmp_path / "models" / "base")
    assert record == {"source": "hf:org/tiny-math@v1.0", "repo": "org/tiny-math", "revision": commit}
    assert calls[0][:2] == ("org/tiny-math", "v1.0") and "*.safetensors" in calls[0][2]
    assert (tmp_path / "models" / "base" / "model.safetensors").exists()
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["base"]  # built beside, then renamed: no temp left


def test_hash_path_sees_every_change_to_a_folder(tmp_path):
    from a5core.artifacts import hash_path

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

    from a5core.model_io import gguf_parsed_once

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
