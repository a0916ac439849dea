"""a5core/base/code.py: what a stage executes, hashed without docstrings, comments, formatting and console text
(issue 60, item 2). The real DVC run of it (a docstring and comment edit in every package reruns nothing below
code_hashes; an executed edit reruns exactly its stages) is in tests/test_smoke_dag.py."""

import textwrap
from pathlib import Path

import pytest

from a5core.base.code import code_roots, executed_source, fingerprint, write_hashes

BASE = '''
"""A module."""
import logging
import sys

logger = logging.getLogger(__name__)


class Box:
    """A box."""

    def size(self, x):
        """Its size."""
        logger.info("size of %s", x)
        print(f"computing {x}")
        if x < 0:
            sys.exit("error: negative")
        return x * 2  # doubled
'''


def same(edited: str) -> bool:
    return executed_source(textwrap.dedent(BASE)) == executed_source(textwrap.dedent(edited))


def test_docstrings_comments_and_formatting_are_not_executed_code():
    assert same(BASE.replace('"""A module."""', '"""Another text,\n\nover lines."""'))
    assert same(BASE.replace('"""A box."""', '"""A crate."""').replace('"""Its size."""', '"""Twice x."""'))
    assert same(
        BASE.replace("# doubled", "# twice").replace("x * 2", "x*2").replace("        return", "\n        return")
    )
    assert same(BASE.replace('        """Its size."""\n', ""))  # a docstring removed
    only_doc = "def f():\n    '''Nothing.'''\n"
    assert executed_source(only_doc) == executed_source("def f():\n    pass\n")


def test_console_text_is_not_executed_code():
    assert same(BASE.replace('"size of %s"', '"the size of %s"'))
    assert same(BASE.replace('f"computing {x}"', 'f"now computing {x}!"'))
    assert same(BASE.replace('"error: negative"', '"error: x must be at least 0"'))


@pytest.mark.parametrize(
    "old, new",
    [
        ("x * 2", "x * 3"),  # a value
        ("x < 0", "x <= 0"),  # a branch
        ('logger.info("size of %s", x)', 'logger.info("size of %s", x + 1)'),  # what a message computes is kept
        ('print(f"computing {x}")', 'print(f"computing {x}", file=open("log.txt", "w"))'),  # print to a file: output
        ('sys.exit("error: negative")', "sys.exit(3)"),  # an exit status
        ('"""A box."""', '"""A box."""\n    unit = "cm"'),  # a class attribute beside a docstring
    ],
)
def test_an_executed_edit_changes_the_hash(old, new):
    assert old in BASE
    assert not same(BASE.replace(old, new))


def test_text_written_to_a_file_is_executed_code():
    a = 'def f(out):\n    print("one", file=out)\n'
    assert executed_source(a) != executed_source(a.replace('"one"', '"two"'))
    b = 'def f():\n    raise ValueError("one")\n'  # an exception's text can reach a results file: it counts
    assert executed_source(b) != executed_source(b.replace('"one"', '"two"'))


def test_the_tree_has_no_empty_fields_so_python_versions_agree():
    """3.12 added `type_params=[]` to every def and class; empty fields are left out of the dump."""
    dump = executed_source(textwrap.dedent(BASE))
    assert "type_params" not in dump and "=[]" not in dump and "=None" not in dump
    assert dump.startswith("Module(body=[Import(")


def test_hash_files_per_package_rewritten_only_when_executed_code_changes(tmp_path):
    repo = tmp_path / "repo"
    for path, text in {
        "a5core/__init__.py": '"""top."""\n',
        "a5core/base/__init__.py": '"""base."""\n',
        "a5core/base/one.py": "X = 1\n",
        "a5core/data/__init__.py": "",
        "a5core/data/subset.json": '{"ids": [1, 2]}\n',
        "rewards/__init__.py": "",
        "stages/sft.py": "print('hi')\n",
    }.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    (repo / "a5core/base/__pycache__").mkdir()
    (repo / "a5core/base/__pycache__/one.cpython-311.pyc").write_bytes(b"\0bytecode")
    assert list(code_roots(repo)) == ["a5core/base", "a5core/data", "rewards", "stages/sft"]
    out = tmp_path / "code_hashes"
    assert write_hashes(repo, out) == ["a5core/base", "a5core/data", "rewards", "stages/sft"]
    lines = (out / "a5core/base.txt").read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["a5core/base/__init__.py", "a5core/base/one.py"]  # no bytecode
    stamp = (out / "a5core/base.txt").stat().st_mtime_ns
    (repo / "a5core/base/one.py").write_text('"""Now documented."""\nX = 1  # one\n')
    assert write_hashes(repo, out) == [] and (out / "a5core/base.txt").stat().st_mtime_ns == stamp
    (repo / "a5core/base/one.py").write_text("X = 2\n")
    (repo / "a5core/data/subset.json").write_text('{"ids": [1, 3]}\n')  # a data file: its bytes
    assert write_hashes(repo, out) == ["a5core/base", "a5core/data"]
    (repo / "stages/sft.py").unlink()
    write_hashes(repo, out)
    assert not (out / "stages/sft.txt").exists()  # a script gone: its hash file too


def test_this_repository_s_hash_files_are_current():
    """code_hashes/ in git is what the code_hashes stage writes for this tree (`dvc repro code_hashes`): a fresh clone
    has the files every stage depends on."""
    root = Path(__file__).resolve().parents[1]
    committed = {p.relative_to(root / "code_hashes"): p.read_text() for p in (root / "code_hashes").rglob("*.txt")}
    expected = {Path(f"{name}.txt"): fingerprint(path, root) for name, path in code_roots(root).items()}
    stale = sorted(str(p) for p in expected.keys() | committed.keys() if expected.get(p) != committed.get(p))
    assert not stale, f"code_hashes/ is stale for {stale}: run dvc repro code_hashes"
