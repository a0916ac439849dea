"""tools/ablations.py: contrasts between runs, paired by question, against hand-computed differences, with verdicts
corrected per family (Holm)."""

import json

from tools.ablations import (
    _rows,
    contrast,
    final_model,
    intervals,
    power_text,
    ran_only,
    replicated,
    replicates_table,
    table,
)


def _model(folder, per_question: dict, protocol: str = "p") -> None:
    folder.mkdir(parents=True)
    acc = sum(per_question.values()) / len(per_question)
    record = {"protocol": protocol, "metrics": {"eval/accuracy": acc}, "per_question": per_question}
    (folder / "validation.json").write_text(json.dumps(record))


def test_contrast_is_paired_by_question_and_marks_protocols(tmp_path):
    _model(tmp_path / "grpo_ref", {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0})
    _model(tmp_path / "grpo_a", {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.5, "extra": 1.0})  # extra: not in both
    _model(tmp_path / "grpo_b", {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0}, protocol="other prompt")
    a = contrast(tmp_path, "grpo_a", "grpo_ref")
    # paired over q1..q4: differences 1, 0, 1, 0.5 -> mean 0.625; a resampled mean is 0 only when all four draws
    # are q2, (1/4)^4 of the time, so p is about 2 / 256
    assert a["delta"][0] == 0.625 and a["delta"][1] > 0 and 0 < a["p"] < 0.03 and a["questions"] == 4
    assert not a["note"]
    b = contrast(tmp_path, "grpo_b", "grpo_ref")
    assert b["delta"] == (0.0, 0.0, 0.0) and b["p"] == 1.0 and "different prompt" in b["note"]
    row = _rows([a, b])[0].split(" | ")
    assert row[3].startswith("+0.625 (") and "✓" in row[3] and float(row[5]) == min(1, round(2 * a["p"], 3)), row


def test_a_family_s_verdicts_are_holm_corrected():
    """Three contrasts at p = 0.01, 0.03, 0.04: alone each is below 0.05; Holm keeps only the first (0.03, then
    max(0.06, 0.04) = 0.06 twice)."""
    family = [
        {"name": n, "accuracy": 0.5, "reference": 0.4, "delta": (0.1, 0.01, 0.2), "p": p, "questions": 9, "seeds": 1}
        | {"note": ""}
        for n, p in (("a", 0.01), ("b", 0.04), ("c", 0.03))
    ]
    rows = [r.split(" | ") for r in _rows(family)]
    assert [r[5] for r in rows] == ["0.030", "0.060", "0.060"]
    assert ["✓" in r[3] for r in rows] == [True, False, False]


def test_families_use_their_first_run_as_reference_and_the_last_ei_round(tmp_path):
    for k in (1, 2, 10):
        _model(tmp_path / "ei_G4" / f"round_{k}", {"q1": float(k == 10)})
    _model(tmp_path / "ei_G8" / "round_10", {"q1": 0.0})
    assert final_model(tmp_path, "ei_G4").name == "round_10"  # numeric, not lexical, order
    text = table({"ei_runs": {"G4": {}, "G8": {}}}, tmp_path, [])
    assert "| ei_G8 − ei_G4 | 0.000 | 1.000 | -1.000" in text and text.count("\n") == 2


def test_grpo_contrasts_use_the_seed_replicates(tmp_path):
    """With replicates.seeds, a GRPO contrast compares the means over each run's seeds (hierarchical bootstrap);
    the reference's replicates are read as well, and the row says how many seeds."""
    ref = {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0}
    _model(tmp_path / "grpo_ref", ref)
    _model(tmp_path / "grpo_ref_seed1", ref)
    _model(tmp_path / "grpo_a", {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.5})
    _model(tmp_path / "grpo_a_seed1", {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0})  # this seed learned nothing
    c = contrast(tmp_path, "grpo_a", "grpo_ref", seeds=(1,))
    assert c["seeds"] == 2 and c["accuracy"] == (0.875 + 0.25) / 2 and c["reference"] == 0.25
    assert c["delta"][0] == 0.3125 and c["delta"][1] <= 0 and c["p"] > 0.05  # one seed of two moved: not resolved
    reps = {"replicates": {"grpo_runs": ["ref", "a"], "seeds": [1]}}
    text = table({"grpo_runs": {"ref": {}, "a": {}}, **reps}, tmp_path, [])
    assert "| grpo_a − grpo_ref | 0.562 | 0.250 | +0.312 (" in text and "| 4 | 2 |" in text
    only_a = table({"grpo_runs": {"ref": {}, "a": {}}, "replicates": {"grpo_runs": ["a"], "seeds": [1]}}, tmp_path, [])
    assert "| grpo_a − grpo_ref | 0.562 | 0.250 | +0.312 (" in only_a  # the reference: its own run alone (0.25)
    paired = table({"grpo_runs": {"ref": {}, "a": {}}, **reps}, tmp_path, [("grpo_a", "grpo_ref")])
    assert paired.count("| grpo_a − grpo_ref | 0.562 | 0.250 | +0.312 (") == 2  # a --pair uses the seeds too
    records = replicated({"replicates": {"grpo_runs": ["ref", "a"], "seeds": [1]}}, tmp_path)
    h = intervals(records)  # once, for the power line and the table
    power = power_text(records, h)
    # seed SDs: ref 0 (two equal replicates), a 0.4419 (0.875 and 0.25, ddof 1); 4 questions x 1 sample x 2 seeds
    assert "SD ref 0.000, a 0.442 (mean 0.221)" in power and "4 questions x 1 samples x 2 seeds" in power
    assert "Power (GRPO, 2 seeds)" in power and "Power (SFT" not in power
    rows = replicates_table(h)  # the summary's table, from the model folders alone
    assert "| GRPO | ref | 2 | 0.250 (" in rows and "| GRPO | a | 2 | 0.562 (" in rows and "| 0.442 |" in rows, rows
    assert power_text({}, intervals(replicated({"replicates": {"grpo_runs": [], "seeds": [1]}}, tmp_path))) == ""


def test_ran_only_tabulates_a_study_cut_short_on_what_ran(tmp_path):
    """`--ran-only` drops the runs whose final model (or a replicate's) is missing, and a family without its
    reference, and says which; what ran is compared as before."""
    for folder in ("grpo_ref", "grpo_ref_seed1", "grpo_a", "grpo_a_seed1", "grpo_b", "sft_x", "ei_G4/round_2"):
        _model(tmp_path / folder, {"q1": 1.0, "q2": 0.0})
    params = {
        "sft_runs": {"w": {}, "x": {}},  # the reference w has not run: the family is left out
        "ei_runs": {"G4": {}},
        "grpo_runs": {"ref": {}, "a": {}, "b": {}, "c": {}},  # b ran but its seed-1 replicate did not; c did not run
        "replicates": {"seeds": [1], "grpo_runs": ["ref", "a", "b"], "ei_runs": ["G4"]},  # ei_G4_seed1: not run
    }
    kept, dropped = ran_only(params, tmp_path)
    assert list(kept["grpo_runs"]) == ["ref", "a"] and kept["replicates"]["grpo_runs"] == ["ref", "a"]
    assert kept["sft_runs"] == {} and kept["ei_runs"] == {} and kept["replicates"]["seeds"] == [1]
    assert dropped == ["sft_w", "sft_x", "ei_G4", "grpo_b", "grpo_c"]
    text = table(kept, tmp_path, [])
    assert "| grpo_a − grpo_ref |" in text and "grpo_b" not in text and text.count("\n") == 2
    assert set(replicated(kept, tmp_path)) == {("grpo", "ref"), ("grpo", "a")}
