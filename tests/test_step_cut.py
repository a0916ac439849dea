"""bench/step_cut.py runs each way of cutting a step in its own process and finds the same update as the handout's
padded split (tiny model, short long-tail lengths; the measurement itself is in reports/step_cut.md)."""

import argparse

from bench import step_cut


def test_step_cut_compares_variants_against_the_padded_split(tmp_path):
    from a5core.model.loading import build_tiny_model

    model, tok = build_tiny_model(seed=0)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    variants = [
        "padded, handout micro-batch 2",
        "token budget (8 x longest)",
        "token budget, one prompt per micro-batch",
        "packed + chunked + checkpointing",
    ]
    a = argparse.Namespace(
        model=str(tmp_path / "m"),
        lengths="longtail",
        rollouts=8,
        group=4,
        max_tokens=24,
        reps=1,
        autocast="off",
        variants=variants,
    )
    out = step_cut._compare(a, "grpo")
    assert list(out) == variants and out[variants[0]]["time_ratio"] == 1.0
    assert all(row["max_abs_update_diff"] < 1e-6 for row in out.values())
    assert out[variants[3]]["padding_fraction"] == 0.0 < out[variants[0]]["padding_fraction"]


def test_positions_per_real_position_by_hand():
    z = step_cut.Size
    # questions 0 and 1, prompts of 10 tokens, template 8: 13, 17, 11 and 10 positions
    sizes = [z(10, 4, 0), z(10, 8, 1), z(10, 2, 0), z(10, 1, 1)]
    real = 13 + 17 + 11 + 10
    # handout split of 2: [13, 17] and [11, 10] mix questions, so only the template is computed once
    assert step_cut.work(sizes, 8, 4, 2) == (8 + 2 * 9 + 8 + 2 * 3) / real
    # budget 34, longest first: [17, 13] and [11, 10], the same
    assert step_cut.work(sizes, 8, 4, 1, 34) == (8 + 2 * 9 + 8 + 2 * 3) / real
    # one prompt per micro-batch: [17, 10] (its prompt capped at 10 - 1 so each row keeps a position), [13, 11]
    assert step_cut.work(sizes, 8, 4, 1, 34, by_question=True) == (9 + 2 * 8 + 10 + 2 * 3) / real
    assert step_cut.work(sizes, 8, 4, 1, 34, packed=True) == 1.0
