"""bench/step_cut.py runs each way of cutting a step in its own process and finds the same update as the handout's
padded split (tiny model, short long-tail lengths; the measurement itself is in reports/step_cut.md)."""

import argparse

from bench import step_cut


def test_step_cut_compares_variants_against_the_padded_split(tmp_path):
    from a5core.model_io import build_tiny_model

    model, tok = build_tiny_model(seed=0)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    variants = ["padded, handout micro-batch 2", "token budget (8 x longest)", "packed + chunked + checkpointing"]
    a = argparse.Namespace(
        model=str(tmp_path / "m"), lengths="longtail", rollouts=4, max_tokens=24, reps=1, variants=variants
    )
    out = step_cut._compare(a, "grpo")
    assert list(out) == variants and out[variants[0]]["time_ratio"] == 1.0
    assert all(row["max_abs_update_diff"] < 1e-6 for row in out.values())
    assert out[variants[2]]["padding_fraction"] == 0.0 < out[variants[0]]["padding_fraction"]


def test_padded_share_by_hand():
    sizes = [(1, 4), (1, 2), (1, 8), (1, 1)]  # 4, 2, 8 and 1 positions
    assert step_cut.padded_share(sizes, 2, None, False, 4) == 1 - 15 / (2 * 4 + 2 * 8)
    assert step_cut.padded_share(sizes, 1, 8, False, 4) == 1 - 15 / (8 + 2 * 4 + 1)  # [8] [4, 2] [1]
    assert step_cut.padded_share(sizes, 1, 8, True, 4) == 0.0  # [8] [4, 2, 1] packed
