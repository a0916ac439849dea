"""The a5core modules each stage script can run, found from their import statements (the stages' DVC deps).

`python -m tools.stage_deps` prints, for every script under stages/, the a5core paths its `deps:` in dvc.yaml must
list (a package folder when every module in it is used); `--write` puts them into dvc.yaml.
`python -m tools.stage_deps --ei-round K` prints the dvc.yaml block of Expert Iteration round K (chained to round
K-1), to add a round. tests/test_dvc_deps.py checks that dvc.yaml
lists exactly these, so editing a module reruns the stages that use it and no others (narrow invalidation: a change
to the plots reruns only the plots, a change to GRPO only the GRPO stages).
Imports inside functions count (they run when the function does). Dynamic imports are not seen: the configured
reward function (in a5core.grader, which every grading stage imports anyway), and the section classes that
`config.check_params` loads only to validate the params file, and the pre-flight (a5core/preflight.py and the
plan it runs), both of which only refuse and change no output.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_file(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.exists():
            return p
    return None


def _imported(path: Path) -> set[str]:
    """a5core modules named by the import statements of one file (`from a5core import x` may name a submodule)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "a5core"}
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] == "a5core"
            and node.level == 0
        ):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if module_file(f"{node.module}.{a.name}")}
    return out


def closure(script: Path) -> set[Path]:
    """Every a5core file that importing `script` (and calling into it) can load, parent packages included."""
    todo, seen = list(_imported(script)), set()
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__, a/b/__init__ first
            sub = ".".join(parts[:i])
            f = module_file(sub)
            if f and f not in seen:
                seen.add(f)
                todo.extend(_imported(f))
    return seen


def compact(files: set[Path]) -> list[str]:
    """Relative paths, with a package folder in place of its modules when all of them are used."""
    out = set()
    for f in files:
        pkg = f.parent
        members = {p for p in pkg.glob("*.py")}
        use_dir = pkg != ROOT / "a5core" and members <= files
        out.add(str((pkg if use_dir else f).relative_to(ROOT)))
    return sorted(out)


def expected_deps() -> dict[str, list[str]]:
    return {f"stages/{p.name}": compact(closure(p)) for p in sorted((ROOT / "stages").glob("*.py"))}


def ei_round_block(k: int) -> str:
    """dvc.yaml text of stage ei_round_<k> (one per entry of ei_runs): trains round k-1's model (round 1:
    ei.init_policy)."""
    r, code = f"round_{k}", ", ".join(["stages/ei_round.py"] + expected_deps()["stages/ei_round.py"])
    res, prev = f"results/ei/${{key}}/{r}", f"results/ei/${{key}}/round_{k - 1}"
    start = "models/${ei.init_policy}" if k == 1 else f"models/ei_${{key}}/round_{k - 1}"
    initial = start if k == 1 else f"{prev}/initial.json"
    history = "" if k == 1 else f" --history {prev}/logs/rounds.csv"
    history_dep = "" if k == 1 else f' "{prev}/logs/rounds.csv", "{initial}",'
    return f"""  ei_round_{k}:
    foreach: ${{ei_runs}}
    do:
      cmd: python stages/ei_round.py --run ${{key}} --round {k} --model {start} --initial {initial}{history}
        --train data/prepared/train.parquet --validation data/prepared/validation.parquet --out models/ei_${{key}}/{r}
        --rollouts {res}/rollouts.parquet --metrics {res}/metrics.json --report {res}/report.md --live {res}/live
        --logs {res}/logs --initial_out {res}/initial.json --scratch scratch/ei_${{key}}/{r}
        --record {res}/run_record.json
      deps: [{code}, "{start}",{history_dep} data/prepared/train.parquet, data/prepared/validation.parquet]
      params: [ei, "ei_runs.${{key}}", sft, validation, generation, logging, model]
      outs: ["models/ei_${{key}}/{r}", "{res}/rollouts.parquet", {{"{res}/logs": {{cache: false}}}},
        {{"{res}/live/metrics.json": {{cache: false}}}}, {{"{res}/report.md": {{cache: false}}}},
        {{"{res}/initial.json": {{cache: false}}}}, {{"{res}/details.json": {{cache: false}}}}]
      metrics: [{{"{res}/metrics.json": {{cache: false}}}}]
      plots: [{{"{res}/live/plots": {{cache: false, x: step}}}}]
"""


def rewrite_dvc_yaml(text: str) -> str:
    """dvc.yaml with every stage's a5core deps set to the modules its script imports (other deps kept in place)."""
    import re

    expected = expected_deps()
    out = []
    for line in text.splitlines(keepends=True):
        m = re.match(r"(\s*deps: \[)(stages/[\w]+\.py), (.*)\]\s*$", line)
        if m and m.group(2) in expected:
            others = [d for d in m.group(3).split(", ") if not d.startswith("a5core")]
            line = f"{m.group(1)}{', '.join([m.group(2), *expected[m.group(2)], *others])}]\n"
        out.append(line)
    return "".join(out)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--ei-round"]:
        print(ei_round_block(int(sys.argv[2])), end="")
    elif sys.argv[1:2] == ["--write"]:  # update dvc.yaml in place
        path = ROOT / "dvc.yaml"
        path.write_text(rewrite_dvc_yaml(path.read_text()))
    else:
        for script, deps in expected_deps().items():
            print(f"{script}: [{', '.join([script] + deps)}]")
