"""The documentation's links: every relative link in README.md, docs/*.md and reports/**/*.md resolves to a file or
folder of the repository (an anchor to a heading of that file, GitHub's slug), no link leaves the repository except
http(s) URLs, every docs/ page is reachable from README.md, reports/README.md links every report file, and README.md
stays a few screens (at most 200 lines). Offline and fast: nothing is fetched."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

from tools import report_dates

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target "title") and ![alt](target); text may hold one level of brackets.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)[^)]*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def documents() -> list[Path]:
    docs = sorted((ROOT / "docs").glob("*.md"))
    reports = sorted((ROOT / "reports").rglob("*.md"))
    return [ROOT / "README.md", *docs, *reports]


def outside_fences(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    out, fence = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        out.append((number, line))
    return out


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    return [(n, INLINE_CODE.sub(lambda c: " " * len(c.group(0)), line)) for n, line in outside_fences(text)]


def links(text: str) -> list[tuple[int, str]]:
    found = []
    for number, line in prose_lines(text):
        found += [(number, m.group(1).strip("<>")) for m in INLINE_LINK.finditer(line)]
        m = REFERENCE_DEF.match(line)
        if m:
            found.append((number, m.group(1).strip("<>")))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lowercased, punctuation and symbols dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    kept = [c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM"]
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    out = set(HTML_ANCHOR.findall(text))
    for _, line in outside_fences(text):
        h = ATX_HEADING.match(line)
        if h:
            base = slug(h.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def git_ignored(paths: list[Path]) -> set[Path]:
    """The paths git ignores (a link to one would not resolve on the repository's web page); none if no git."""
    if not paths:
        return set()
    try:
        r = subprocess.run(
            ["git", "-C", str(ROOT), "check-ignore", "--no-index", "--stdin"],
            input="\n".join(str(p.relative_to(ROOT)) for p in paths),
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return set()
    if r.returncode not in (0, 1):  # 128: not a git work tree
        return set()
    return {(ROOT / line).resolve() for line in r.stdout.splitlines() if line}


def broken_links(doc: Path) -> list[str]:
    problems, targets = [], []
    for number, target in links(doc.read_text(encoding="utf-8")):
        where = f"{doc.relative_to(ROOT)}:{number}: {target}"
        if SCHEME.match(target):
            if not target.lower().startswith(("http://", "https://")):
                problems.append(f"{where}: only http(s) links may leave the repository")
            continue
        path_part, _, anchor = target.partition("#")
        if path_part.startswith("/"):
            problems.append(f"{where}: write links relative to the file, not from /")
            continue
        resolved = (doc.parent / unquote(path_part)).resolve() if path_part else doc.resolve()
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{where}: leaves the repository")
            continue
        if not resolved.exists():
            problems.append(f"{where}: no such file")
            continue
        if anchor and resolved.suffix == ".md" and unquote(anchor).lower() not in anchors(resolved):
            problems.append(f"{where}: no heading with anchor #{anchor} in {resolved.relative_to(ROOT)}")
        targets.append((where, resolved))
    ignored = git_ignored([t for _, t in targets])
    problems += [f"{where}: git ignores it" for where, t in targets if t in ignored]
    return problems


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves_inside_the_repository(doc: Path) -> None:
    assert not broken_links(doc), "\n".join(broken_links(doc))


def test_readme_is_a_few_screens() -> None:
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = ROOT / "README.md"
    linked = {(ROOT / t.partition("#")[0]).resolve() for _, t in links(readme.read_text(encoding="utf-8"))}
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"docs/ pages README.md does not link: {unlinked}"


def test_reports_index_links_every_report_file() -> None:
    index = ROOT / "reports" / "README.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for _, t in links(index.read_text(encoding="utf-8"))}
    missing = [
        str(f.relative_to(ROOT))
        for folder in (ROOT / "reports", ROOT / "reports" / "cpu_study")
        for f in sorted(folder.iterdir())
        if f.is_file() and f.resolve() != index.resolve() and f.resolve() not in linked
    ]
    assert not missing, f"reports/README.md has no row linking: {missing}"


def test_slug_follows_github() -> None:
    assert slug("Full scale on GPUs") == "full-scale-on-gpus"
    assert slug("The CPU study (issue #14, item 3)") == "the-cpu-study-issue-14-item-3"
    assert slug("`dvc exp run`: one experiment") == "dvc-exp-run-one-experiment"
    assert slug("a5 against TRL's GRPOTrainer") == "a5-against-trls-grpotrainer"
    assert slug("Issue #25: every seed from `derive_seed`, and what it moved") == (
        "issue-25-every-seed-from-derive_seed-and-what-it-moved"
    )


def test_the_reports_index_dates_are_the_files_last_changes():
    """reports/README.md's date column is what git says (tools/report_dates.py; `--write` fixes it)."""
    git = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    if git.returncode != 0 or git.stdout.strip() != "false":
        pytest.skip("needs the repository's whole git history")
    text = report_dates.INDEX.read_text()
    assert len(report_dates.rows(text)) > 30
    found = report_dates.stale(text)
    assert not found, f"run `python -m tools.report_dates --write`: {found}"


def test_ci_runs_the_readmes_test_command():
    """`.ci/run` installs from scratch, then runs the test command the README gives (the guide's contract)."""
    line = next(x for x in (ROOT / "README.md").read_text().splitlines() if x.rstrip().endswith("(what CI runs)"))
    command = line.split("#")[0].strip()
    assert command.startswith("bash scripts/bootstrap.sh && ") and " -n 2" in command, command
    assert command in (ROOT / ".ci" / "run").read_text(), command
