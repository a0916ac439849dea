"""tools/ablations.py: contrasts between runs, paired by question, against hand-computed differences."""

import json

from tools.ablations import contrast, final_model, table


def _model(folder, per_question: dict, protocol: str = "p") -> None:
    folder.mkdir(parents=True)
    acc = sum(per_question.values()) / len(per_question)
    record = {"protocol": protocol, "metrics": {"eval/accuracy": acc}, "per_question": per_question}
    (folder / "validation.json").write_text(json.dumps(record))


def test_contrast_is_paired_by_question_and_marks_protocols(tmp_path):
    _model(tmp_path / "grpo_ref", {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0})
    _model(tmp_path / "grpo_a", {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.5, "extra": 1.0})  # extra: not in both
    _model(tmp_path / "grpo_b", {"q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": 0.0}, protocol="other prompt")
    row = contrast(tmp_path, "grpo_a", "grpo_ref").split(" | ")
    # paired over q1..q4: differences 1, 0, 1, 0.5 -> mean 0.625; the bootstrap interval is (0.25, 1.0) at most
    assert row[3].startswith("+0.625 (") and "✓" in row[3] and row[4] == "4" and row[5].strip(" |") == "", row
    row = contrast(tmp_path, "grpo_b", "grpo_ref").split(" | ")
    assert row[3].startswith("+0.000 (+0.000 to +0.000)") and "✓" not in row[3] and "different prompt" in row[5]


def test_families_use_their_first_run_as_reference_and_the_last_ei_round(tmp_path):
    for k in (1, 2, 10):
        _model(tmp_path / "ei_G4" / f"round_{k}", {"q1": float(k == 10)})
    _model(tmp_path / "ei_G8" / "round_10", {"q1": 0.0})
    assert final_model(tmp_path, "ei_G4").name == "round_10"  # numeric, not lexical, order
    text = table({"ei_runs": {"G4": {}, "G8": {}}}, tmp_path, [])
    assert "| ei_G8 − ei_G4 | 0.000 | 1.000 | -1.000" in text and text.count("\n") == 2
