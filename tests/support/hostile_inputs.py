"""Hostile inputs. LaTeX fragments shared by the grader's property tests (tests/test_grader_fuzz.py) and its fuzzing
bench (bench/fuzz_grader.py): macros a policy could emit to game or stall the grader, and Unicode confusables. Data
files and prepared Parquet inputs a user could bring, shared by tests/test_errors.py and bench/hostile_sweep.py."""

MACROS = (
    "\\infty",
    "\\exp",
    "\\binom",
    "\\Gamma",
    "\\lfloor",
    "\\rfloor",
    "\\quad",
    "\\text{",
    "\\boxed{",
    "\\frac",
    "\\sqrt",
    "\\ldots",
    "\\cdots",
    "\\pm",
    "\\sum",
    "\\int",
    "\\lim",
    "\\log",
    "\\sin",
    "\\mathbb{R}",
    "\\left(",
    "\\right)",
    "\\!",
    "\\,",
    "~",
    "{",
    "}",
    "(",
    ")",
    "^",
    "_",
    "!",
    "=",
    ",",
    " or ",
    "9",
    "99",
    "0",
    ".",
    "x",
    "e",
    "-",
    "/",
    "\\\\",
    "&",
    "\\begin{pmatrix}",
    "\\end{pmatrix}",
    "\\dfrac",
    "\\cup",
    "%",
    "\\$",
    "$",
    "²",
    "₀",
    "３",
    "х",
    "½",
    "−",
    "\u200b",
)


# ---- hostile user inputs for the stage entry points (tests/test_errors.py, bench/hostile_sweep.py) ----
# Each data case: (name, file name, bytes, the part of the one-line error that names the problem). The file is given
# as data.source (MATH format; SFT cases as data.sft_source) to prepare_math.
GOOD_PROBLEM = b'{"problem": "What is 1+1?", "answer": "2", "unique_id": "p1"}\n'
GOOD_SFT = b'{"prompt": "Q: 1+1?", "response": "</think> <answer>2</answer>", "ground_truth": "2"}\n'
PROBLEM_FILES = [
    ("malformed JSON", "m.jsonl", GOOD_PROBLEM + b'{"problem": "x", "answer": \n', "m.jsonl:2: malformed JSON"),
    ("JSON array line", "m.jsonl", b'[{"problem": "x", "answer": "1"}]\n', "expected a JSON object"),
    ("missing problem", "m.jsonl", b'{"answer": "1"}\n', "missing or empty field 'problem'"),
    ("empty problem", "m.jsonl", b'{"problem": "  ", "answer": "1"}\n', "missing or empty field 'problem'"),
    ("no answer", "m.jsonl", b'{"problem": "x"}\n', "empty field 'answer'"),
    ("empty answer", "m.jsonl", b'{"problem": "x", "answer": ""}\n', "empty field 'answer'"),
    ("int problem", "m.jsonl", b'{"problem": 5, "answer": "1"}\n', "field 'problem' must be a string"),
    ("list answer", "m.jsonl", b'{"problem": "x", "answer": [1]}\n', "got list"),
    ("dict answer", "m.jsonl", b'{"problem": "x", "answer": {"a": 1}}\n', "got dict"),
    ("bool answer", "m.jsonl", b'{"problem": "x", "answer": true}\n', "got bool"),
    ("NaN answer", "m.jsonl", b'{"problem": "x", "answer": NaN}\n', "field 'answer' is nan"),
    ("infinite answer", "m.jsonl", b'{"problem": "x", "answer": -Infinity}\n', "field 'answer' is -inf"),
    ("list unique_id", "m.jsonl", b'{"problem": "x", "answer": "1", "unique_id": [1]}\n', "field 'unique_id'"),
    ("duplicate unique_id", "m.jsonl", GOOD_PROBLEM + GOOD_PROBLEM.replace(b"1+1", b"2+2"), "duplicate unique_id"),
    ("empty file", "m.jsonl", b"", "no records"),
    ("blank lines only", "m.jsonl", b"\n  \n\n", "no records"),
    ("UTF-8 BOM", "m.jsonl", b"\xef\xbb\xbf" + GOOD_PROBLEM, "m.jsonl:1: malformed JSON"),
    ("invalid UTF-8", "m.jsonl", GOOD_PROBLEM + b'{"problem": "\xff"}\n', "m.jsonl:2: not valid UTF-8"),
    ("GSM8K without ####", "m.jsonl", b'{"question": "x", "answer": "it is 4"}\n', "no '#### <number>'"),
    ("a 50 MB line", "m.jsonl", b'{"problem": "' + b"x" * 50_000_000 + b'", "answer": "1"}\n', "over its cap"),
    ("ungradable answer", "m.jsonl", b'{"problem": "x", "answer": "\\\\boxed{1"}\n', "cannot be graded"),
    ("not Parquet", "m.parquet", b"PAR1 not really", "not a readable Parquet file"),
]
SFT_FILES = [
    ("SFT without response", "s.jsonl", b'{"prompt": "x", "ground_truth": "1"}\n', "field 'response'"),
    ("SFT empty response", "s.jsonl", b'{"prompt": "x", "response": "", "ground_truth": "1"}\n', "field 'response'"),
    ("SFT without ground truth", "s.jsonl", b'{"prompt": "x", "response": "no answer here"}\n', "no ground truth"),
    ("SFT int prompt", "s.jsonl", b'{"prompt": 3, "response": "r", "ground_truth": "1"}\n', "field 'prompt'"),
    ("SFT duplicate ids", "s.jsonl", (GOOD_SFT[:-2] + b', "unique_id": "a"}\n') * 2, "duplicate unique_id"),
]
# Parquet tables given as data.source (columns -> values), and prepared Parquet inputs of the later stages
PARQUET_SOURCES = [
    ("Parquet wrong schema", {"question_text": ["x"], "solution_text": ["1"]}, "missing or empty field 'problem'"),
    ("Parquet int problem column", {"problem": [1], "answer": ["1"]}, "field 'problem' must be a string"),
    ("Parquet zero rows", {"problem": [], "answer": []}, "no records"),
]
# (name, stage input, columns -> values, or bytes; the error's part): each stage input is checked before a model loads
PREPARED = [
    ("int answer column", {"unique_id": ["a"], "problem": ["x"], "answer": [1]}, "column 'answer' is int64"),
    ("no answer column", {"unique_id": ["a"], "problem": ["x"]}, "missing column(s) ['answer']"),
    ("null problem", {"unique_id": ["a", "b"], "problem": ["x", None], "answer": ["1", "2"]}, "'problem' has 1 null"),
    ("zero rows", {"unique_id": [], "problem": [], "answer": []}, "no rows"),
    ("duplicate ids", {"unique_id": ["a", "a"], "problem": ["x", "y"], "answer": ["1", "2"]}, "duplicate unique_id"),
    ("truncated Parquet", b"PAR1\x15\x04\x15", "not a readable Parquet file"),
    ("not Parquet", b"unique_id,problem,answer\na,x,1\n", "not a readable Parquet file"),
]
