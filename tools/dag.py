"""Writes dvc.yaml from dvc.spec.yaml: `python -m tools.dag` (`--check` only says whether dvc.yaml is current).

- Each stage's script, `code:` (the a5core packages it runs) and `rewards` become deps on their hash files
  (code_hashes/<path>.txt, written by the code_hashes stage); tests/test_dvc_deps.py checks that `code:` names
  exactly the packages the stage imports (tools/stage_deps.py).
- A stage with `rounds: N` is expanded into N chained stages (Expert Iteration's rounds), from one template; every
  such stage has the same N (the `<rounds>` of the other stages), and one may also be a matrix (EI's replicates).
- The output is laid out for reading: one `--flag value` of a command and one path per line, no line over 120
  characters; tests/test_dvc_deps.py checks that dvc.yaml is exactly what this writes and that it parses back to the
  same stages.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap

import yaml

from tools.stage_deps import ROOT

SPEC, OUT = ROOT / "dvc.spec.yaml", ROOT / "dvc.yaml"
WIDTH = 120
_VAR = re.compile(r"<(\w+)>")


def _sub(text: str, names: dict[str, str]) -> str | None:
    """`text` with every `<name>` filled in, or None when one of them is undefined."""
    missing = [m for m in _VAR.findall(text) if m not in names]
    return None if missing else _VAR.sub(lambda m: names[m.group(1)], text)


def _sub_cmd(cmd: str, names: dict[str, str]) -> str:
    """A command with `--flag <name>` pairs whose name is undefined left out (round 1 has no `--history`)."""
    tokens, out = cmd.split(), []
    for i, tok in enumerate(tokens):
        value = _sub(tok, names)
        if value is None:
            if not (i > 0 and tokens[i - 1].startswith("--") and out and out[-1] == tokens[i - 1]):
                raise ValueError(f"{tok!r} names an undefined <variable> outside a --flag pair")
            out.pop()  # its flag
        else:
            out.append(value)
    return " ".join(out)


def _sub_entries(entries: list, names: dict[str, str]) -> list:
    """List entries (paths, or {path: options}) filled in; undefined ones dropped, repeats removed."""
    out: list = []
    for entry in entries:
        key = entry if isinstance(entry, str) else next(iter(entry))
        path = _sub(key, names)
        if path is None:
            continue
        new = path if isinstance(entry, str) else {path: entry[key]}
        if new not in out:
            out.append(new)
    return out


def _fill(body: dict, names: dict[str, str]) -> dict:
    out = {}
    for key, value in body.items():
        if key == "cmd":
            out[key] = _sub_cmd(value, names)
        elif isinstance(value, list):
            out[key] = _sub_entries(value, names)
        elif isinstance(value, str):
            out[key] = _sub(value, names)
        else:
            out[key] = value
    return out


HASHES = "code_hashes"  # the folder the code_hashes stage writes (dvc.spec.yaml, a5core/base/code.py)


def code_dep(path: str) -> str:
    """The hash file that stands for a code dep (a stage script, a5core/<package>, rewards) in a stage's deps."""
    return f"{HASHES}/{path.removesuffix('.py')}.txt"


def _writes_hashes(body: dict) -> bool:
    return any((o if isinstance(o, str) else next(iter(o))) == HASHES for o in body.get("outs", []))


def _with_code_deps(body: dict, code: list[str]) -> dict:
    """The stage's script, its a5core packages (its `code:`) and rewards/ as their hash files (the first deps), so
    only an edit of what they execute reruns the stage; the code_hashes stage itself keeps the folders."""
    script = next(word for word in body["cmd"].split() if word.endswith(".py"))  # after `python` or the launcher
    deps = body["deps"]
    if deps[0] != script:
        raise ValueError(f"the first dep of {script}'s stage must be the script itself, not {deps[0]}")
    if _writes_hashes(body):
        return body
    rest = [code_dep(d) if d == "rewards" else d for d in deps[1:]]
    return {**body, "deps": [code_dep(script), *(code_dep(f"a5core/{package}") for package in code), *rest]}


def expand(spec: dict) -> tuple[dict[str, tuple[str, dict]], dict[str, str]]:
    """Stage name -> (doc, dvc.yaml stage), in spec order, and the names every stage may use (`<rounds>`)."""
    rounds = {s["rounds"] for s in spec["stages"].values() if "rounds" in s}
    if len(rounds) > 1:
        raise ValueError(f"the `rounds:` stages disagree ({sorted(rounds)}): the plots read one last round")
    glob = {"rounds": str(rounds.pop())} if rounds else {}
    stages: dict[str, tuple[str, dict]] = {}
    for name, stage in spec["stages"].items():
        stage = dict(stage)
        doc, code = stage.pop("doc", ""), stage.pop("code")
        n, first, later = stage.pop("rounds", 0), stage.pop("first", {}), stage.pop("later", {})
        for k in range(1, n + 1) if n else [0]:
            names = dict(glob)
            if n:
                names |= {"k": str(k), "prev": str(k - 1)}
                names |= {a: _sub(v, names) for a, v in (first if k == 1 else later).items()}
            inner = "do" if "do" in stage else None
            body = _with_code_deps(_fill(stage[inner] if inner else stage, names), code)
            out = {**stage, inner: body} if inner else body
            stages[f"{name}_{k}" if n else name] = (_sub(doc, names) if k <= 1 else "", out)
    return stages, glob


def _scalar(s: str, flow: bool = False) -> str:
    special = "[]{}," if flow else ""
    plain = s and s[0] not in "-?:,[]{}#&*!|>'\"%@`" and ": " not in s and " #" not in s and not s.endswith(":")
    return s if plain and not any(c in s for c in special) else json.dumps(s)


def _entry(entry, flow: bool = False) -> str:
    if isinstance(entry, str):
        return _scalar(entry, flow)
    ((path, opts),) = entry.items()
    if opts is None:
        return f"{_scalar(path, flow)}:"
    inner = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in opts.items())
    return f"{_scalar(path, flow)}: {{{inner}}}"


def _lines(key: str, value, pad: str) -> list[str]:
    if key == "cmd":  # one `--flag value` per line (a plain scalar folds its lines back into one command)
        parts = re.split(r" (?=--)", value)
        return [f"{pad}cmd: {parts[0]}", *(f"{pad}  {p}" for p in parts[1:])]
    if isinstance(value, list):
        flow = f"{pad}{key}: [{', '.join(_entry(e, True) for e in value)}]"
        if key == "params" and all(isinstance(e, str) for e in value) and len(flow) <= WIDTH:
            return [flow]
        return [f"{pad}{key}:", *(f"{pad}  - {_entry(e)}" for e in value)]
    if isinstance(value, dict):  # a matrix: one `name: values` per line
        return [f"{pad}{key}:", *(f"{pad}  {k}: {v}" for k, v in value.items())]
    return [f"{pad}{key}: {value}"]


def render(spec: dict) -> str:
    stages, glob = expand(spec)
    out = ["# Generated from dvc.spec.yaml by `python -m tools.dag`: edit that file, not this one."]
    out += [f"# {line}".rstrip() for line in _sub(spec["header"], glob).splitlines()] + ["stages:"]
    for name, (doc, stage) in stages.items():
        out += [f"  # {line}" for line in textwrap.wrap(doc, WIDTH - 4)]
        out.append(f"  {name}:")
        for key, value in stage.items():
            if key == "do":
                out.append("    do:")
                for k, v in value.items():
                    out += _lines(k, v, "      ")
            else:
                out += _lines(key, value, "    ")
    for key, value in spec.items():
        if key == "plots_doc":
            out += [f"# {line}".rstrip() for line in textwrap.wrap(value, WIDTH - 2)]
        elif key not in ("header", "stages"):  # top-level plots: DVC's own layout
            out += yaml.safe_dump({key: value}, sort_keys=False, width=WIDTH).splitlines()
    return "\n".join(out) + "\n"


def load_spec() -> dict:
    return yaml.safe_load(SPEC.read_text())


if __name__ == "__main__":
    text = render(load_spec())
    if sys.argv[1:] == ["--check"]:
        current = OUT.read_text() == text
        print("dvc.yaml is current" if current else "dvc.yaml differs from dvc.spec.yaml: run python -m tools.dag")
        sys.exit(0 if current else 1)
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text.splitlines())} lines)")
