"""Model text in reports is inert: escaped for Markdown and HTML, its own tags visible as text."""

from a5core.base.records import GradedSample
from a5core.run.stage_reports import eval_case_report, md_cell

HOSTILE = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "![x](http://evil.example/p.png)",
    "[click](javascript:alert(1))",
    "<think>reasoning</think> <answer>5</answer>",
    "**bold** _em_ `code` | pipe",
    "<a href='javascript:alert(1)'>x</a>",
    "line one\nline two",
    "&lt;already&gt; escaped",
]


def test_md_cell_leaves_no_markup():
    for text in HOSTILE:
        cell = md_cell(text)
        for raw in "<>[]()!|*_`'\"":
            assert raw not in cell, (text, cell)
        assert "\n" not in cell
    assert md_cell("<think>x</think>") == "&#60;think&#62;x&#60;&#47;think&#62;".replace("&#47;", "/")
    assert md_cell("x" * 500, limit=10) == "x" * 10 + " …"


def test_reports_escape_every_model_field():
    sample = GradedSample("id<b>", 0, "p", HOSTILE[0], "<gt>", HOSTILE[3], "wrong", 1.0, 0.0, 0.0, 5, "stop", "s", "l")
    metrics = {
        "eval/accuracy": 0.0,
        "eval/accuracy_lo": 0.0,
        "eval/accuracy_hi": 0.5,
        "eval/format_rate": 1.0,
        "count/questions": 1,
        "count/samples_per_question": 1,
        "eval/format1_answer1": 0,
        "eval/format1_answer0": 1,
        "eval/format0_answer0": 0,
    }
    text = eval_case_report("t", [sample], metrics, {"status_counts": {"wrong": 1}})
    assert "<script>" not in text and "<b>" not in text and "<gt>" not in text and "](javascript" not in text
    assert "&#60;script&#62;" in text
