"""The installed environment really parses LaTeX (dvc pins ANTLR 4.9; math-verify's parser must match)."""

import importlib.metadata

import sympy


def test_antlr_runtime_matches_latex_parser():
    from math_verify import LatexExtractionConfig, parse

    half = parse("$\\frac{1}{2}$", extraction_config=[LatexExtractionConfig()], parsing_timeout=None)
    assert any(isinstance(x, sympy.Basic) and x == sympy.Rational(1, 2) for x in half), half
    assert importlib.metadata.version("antlr4-python3-runtime").startswith("4.9")


def test_latex_fallback_compares_equal():
    from a5core.grader.equivalence import exprs_equal, to_expr

    # \sin is outside the safe parser's grammar, so this goes through math-verify's LaTeX parser
    assert exprs_equal(to_expr("\\sin(\\frac{1}{2})"), to_expr("\\sin(0.5)"))
    assert exprs_equal(to_expr("\\frac{1}{2}"), to_expr("0.5"))
