"""bench/roofline.py runs as committed (on a tiny random model) and reports each piece of work against its limit."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.roofline import op_class

ROOT = Path(__file__).resolve().parents[1]


def run_bench(script: str, out: Path, *args: str) -> dict:
    """`python bench/<script> --tiny <args> --out <out>` as committed; its <out>.json."""
    r = subprocess.run(
        [sys.executable, f"bench/{script}", "--tiny", *args, "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.with_suffix(".json").read_text())


def test_operators_fall_in_their_classes():
    assert op_class("aten::mm") == "matmuls" and op_class("aten::addmm") == "matmuls"
    assert op_class("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert (
        op_class("aten::_softmax") == "softmax and sampling" and op_class("aten::multinomial") == "softmax and sampling"
    )
    assert op_class("aten::cat") == "other operators" and op_class("aten::mmap_thing") == "other operators"


@pytest.mark.slow
def test_the_bench_reports_every_piece_of_work_against_its_limit(tmp_path):
    out = tmp_path / "roofline"
    res = run_bench("roofline.py", out, "--square", "128")
    names = [(w["name"].split(":")[0], w["precision"]) for w in res["work"]]
    assert names == [("generate", p) for _ in range(2) for p in ("float32", "bf16 autocast", "bf16 weights")] + [
        ("train", "float32"), ("train", "bf16 autocast"),
    ]  # fmt: skip
    gaps = res["logprob_gap"]  # float32 rollouts rescored in float32 agree to rounding (generation shares the prefix)
    assert set(gaps) == {"float32", "bf16 weights"} and all(g["tokens"] > 0 for g in gaps.values())
    assert gaps["float32"]["max_abs"] < 1e-4 < gaps["bf16 weights"]["mean_abs"]  # bf16 rounding, really run
    for w in res["work"]:
        assert w["tokens_per_s"] > 0 and w["limit_tokens_per_s"] == min(
            w["products_tokens_per_s"], w["memory_tokens_per_s"]
        )
        assert w["fraction"] == pytest.approx(w["tokens_per_s"] / w["limit_tokens_per_s"])
    assert all(0 < w["occupancy"] <= 1 for w in res["work"] if w["name"].startswith("generate"))
    assert res["bandwidth_gb_s"] > 0 and all(v > 0 for row in res["gemm"].values() for v in row.values())
    for prof in res["profile"].values():
        assert prof["seconds"]["matmuls"] > 0 and sum(prof["seconds"].values()) == pytest.approx(
            prof["wall_s"], rel=0.05
        )
    assert "## The work against its limit" in out.with_suffix(".md").read_text()


@pytest.mark.slow
def test_the_decode_paths_bench_runs_every_path_on_the_same_work(tmp_path):
    out = tmp_path / "decode_paths"
    res = run_bench("decode_paths.py", out, "--reps", "1", "--tokens", "8")
    paths = res["paths"]
    assert list(paths) == ["dynamic cache, eager", "static cache, eager", "static cache, compiled"]
    assert (
        paths["dynamic cache, eager"]["speed_vs_dynamic_eager"] == 1.0
        and paths["static cache, compiled"]["first_call_s"] > 0
    )
    for p in paths.values():  # the same float32 computation on each path, to rounding: the same work was timed
        assert p["max_abs_logit_diff"] < 1e-4 and p["tokens_per_s"] == pytest.approx(res["rows"] * 8 / p["seconds"])
    assert res["products"]["gflops"] > 0 and res["products"]["in_cache_gflops"] > 0
    assert "| static cache, compiled |" in out.with_suffix(".md").read_text()


@pytest.mark.slow
def test_the_bf16_head_bench_measures_a_float32_head_on_the_bf16_copy(tmp_path):
    """bench/bf16_head.py: three generators on the same work; the float32 generator matches the float32 model, and the
    float32 head really changes the copy's numerics (without it the two bf16 rows would give the same log-probs)."""
    out = tmp_path / "bf16_head"
    res = run_bench("bf16_head.py", out, "--reps", "1")
    for rows in res["work"].values():
        assert list(rows) == ["float32", "bf16 copy", "bf16 copy, float32 head"]
        f32, copy, head = rows.values()
        assert f32["speed_vs_float32"] == 1.0 and f32["max_abs"] < 1e-5 < copy["mean_abs"]
        assert head["mean_abs"] != copy["mean_abs"] and head["mean_abs"] > 1e-5  # its own numerics, still bf16
    assert "| GRPO rollouts (4 x 4) | bf16 copy, float32 head |" in out.with_suffix(".md").read_text()
