"""End to end on the smoke profile (tiny random model, hf backend): `dvc repro` up to EI round 2 (as if stopped there),
`dvc repro` of the whole DAG (rounds 1-2 are not run again), a cached rerun, `dvc exp run -S` on a GRPO param (only
GRPO and plots re-run), `dvc plots diff` against the baseline, `dvc exp run -S` on an `eval` param (only baseline_eval
and plots re-run), the results a fresh clone shows without running anything, the cache links (one copy of each
model), the grader audit in every GRPO and EI log, and seed replicates of two GRPO runs added by `-S replicates...`."""

import json
import re
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from a5core.base.run_record import read_run_record
from a5core.run.history import read_log
from tests.support.repos import ok, ran_stages, scratch_repo, tree_digest


def disk_usage(*paths: Path) -> int:
    """Bytes of the files under `paths`, each inode counted once (as `du` counts hard links)."""
    seen, total = set(), 0
    for root in paths:
        for f in root.rglob("*"):
            st = f.lstat()
            if f.is_file() and not f.is_symlink() and st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_blocks * 512
    return total


def assert_the_cache_is_a_copy(work: Path, run) -> None:
    """A model file is not its DVC cache entry (`cache.type = reflink,copy`: no write to an output reaches the cache,
    reports/inplace_outputs.md), models + cache is about twice the models on a filesystem without reflinks, and
    `dvc checkout` restores a deleted model."""
    weights = work / "models" / "sft_full" / "model.safetensors"
    linked = [
        p for p in (work / ".dvc" / "cache").rglob("*") if p.is_file() and p.stat().st_ino == weights.stat().st_ino
    ]
    assert not linked and not weights.is_symlink(), "the model file is its cache entry: a write would reach the cache"
    models, both = disk_usage(work / "models"), disk_usage(work / "models", work / ".dvc" / "cache")
    # the rest of the cache is logs and results (every output but metrics is cached, for the run cache)
    assert both <= 2.5 * models, (both, models)
    shutil.rmtree(work / "models" / "sft_full")
    ok(run("dvc", "checkout", "models/sft_full"))
    assert weights.exists()


def pipeline_lines_in_their_own_stages(stdout: str) -> int:
    """How many pipeline lines (`[dvc repro] stage k of N: <stage> | ...`) a run printed; each must sit among its own
    stage's lines, after DVC's `Running stage '<stage>'` and before the next stage's (never a stage late)."""
    current, printed = None, 0
    for line in stdout.splitlines():
        if line.startswith("Running stage '"):
            current = line.split("'")[1]
        elif line.startswith("[dvc repro] stage "):
            assert line.split(": ", 1)[1].split(" | ")[0] == current and "since dvc started | forecast: " in line, line
            printed += 1
    return printed


@pytest.mark.slow
@pytest.mark.dag
def test_whole_dag_on_smoke_profile(tmp_path):
    work, run = scratch_repo(tmp_path, "smoke")
    r = run("dvc", "repro", "ei_round_2@G2")
    ok(r)
    assert {"ei_round_1@G2", "ei_round_2@G2"} <= ran_stages(r) and "ei_round_3@G2" not in ran_stages(r)
    assert "step 1/" in r.stdout and "loss " in r.stdout  # a console line per optimizer step
    assert pipeline_lines_in_their_own_stages(r.stdout) >= 3  # a stage that ends first prints none (issue 64)
    noise = ("Failed to load", "register_constant", "Traceback")  # torchao and torch at import (a5core/stage/entry.py)
    assert not [n for n in noise if n in r.stdout + r.stderr], (r.stdout + r.stderr)[-3000:]
    r = run("dvc", "repro")
    ok(r)
    ran = ran_stages(r)
    assert "ei_round_3@G2" in ran and "plots" in ran and not ran & {"ei_round_1@G2", "ei_round_2@G2", "sft@filtered"}, (
        ran
    )
    dvc_warnings = [
        line for line in (r.stdout + r.stderr).splitlines() if line.startswith("WARNING") and "EI round" not in line
    ]
    assert not dvc_warnings, dvc_warnings
    summary = (work / "reports" / "summary.md").read_text()
    assert "GRPO" in summary and "EI" in summary and "SFT" in summary and "95%" in summary
    # one validation question's rollouts before and after GRPO (the GRPO stage logs its start's completions)
    assert "## A validation question before and after GRPO" in summary and "Before GRPO (step 0), reward" in summary
    base = json.loads((work / "results" / "baseline" / "metrics.json").read_text())
    details = json.loads((work / "results" / "baseline" / "details.json").read_text())
    assert (
        details["count/questions"] == 8
        and base["eval/accuracy_lo"] <= base["eval/accuracy"] <= base["eval/accuracy_hi"]
    )
    assert details["eval/maj@2_lo"] <= details["eval/maj@2"] <= details["eval/maj@2_hi"]  # two samples per question
    grpo = json.loads((work / "results" / "grpo" / "reinforce_baseline" / "details.json").read_text())
    assert {"eval/pass@2", "eval/delta_pass@2_lo", "eval/delta_maj@2_hi"} <= set(grpo)
    assert "pass@k, maj@n (95% CI)" in summary and "maj@2 " in summary
    # the leaderboard: every run on one clock from the base model (each stage timed its validations: none left out)
    board = summary.partition("## Accuracy against training time (the CPU leaderboard)")[2]
    assert all(f"\n| {m} | " in board for m in ("SFT", "EI", "GRPO")) and "Left out" not in board, board
    assert (work / "reports" / "figures" / "leaderboard.png").exists()
    check_grader_audit(work)
    check_rl_moved_the_weights(work)
    assert not (work / "scratch").exists()  # resume state is removed after success
    assert_the_cache_is_a_copy(work, run)
    r = run("dvc", "status")
    assert "up to date" in r.stdout, r.stdout
    r = run("dvc", "repro", "--dry")
    assert "Running stage" not in r.stdout, r.stdout
    check_reruns_change_nothing(work, run, tmp_path)
    check_stage_profile(work, run)
    assert run("git", "add", "-A").returncode == 0 and run("git", "commit", "-qm", "results").returncode == 0
    record = work / "run_records" / "grpo" / "reinforce_baseline"
    made = {name: (record / name).read_text() for name in ("run_record.json", "timing_eval.csv", "timing_train.csv")}
    r = run("dvc", "exp", "run", "-n", "baseline", "-S", "profile=smoke")  # the README's experiment section
    ok(r)
    assert ran_stages(r) <= {"check_params"}, ran_stages(r)  # it records the results there are
    quiet = ("-S", "logging.tracker=tensorboard", "-S", "logging.console_every=5")  # settings that change no output
    r = run("dvc", "exp", "run", "-n", "quiet", "-S", "profile=smoke", *quiet)
    ok(r)
    assert ran_stages(r) <= {"check_params"}, ran_stages(r)  # key no stage (issue 58)
    ok(run("dvc", "exp", "remove", "quiet"))  # out of the experiments table below
    # a field no run of its family reads: check_params, the first stage, says so before anything runs (issue 64)
    r = run("dvc", "exp", "run", "-n", "unread", "-S", "profile=smoke", "-S", "grpo.cliprange=0.3", "check_params")
    ok(r)
    assert "note: grpo@reinforce_baseline does not read grpo.cliprange (null -> 0.3: loss_type" in r.stdout, r.stdout
    assert "note: grpo@clip_offpolicy" not in r.stdout, r.stdout  # grpo_clip reads it
    ok(run("dvc", "exp", "remove", "unread"))
    r = run("dvc", "exp", "run", "-S", "profile=smoke", "-S", "grpo.lr=3e-6")  # the README's form
    ok(r)
    # the GRPO runs rerun, and the plots when their results changed
    grpo = {"grpo@reinforce_baseline", "grpo@no_baseline", "grpo@clip_offpolicy"}
    assert grpo <= ran_stages(r) <= grpo | {"check_params", "plots"}, ran_stages(r)
    rounds = (work / "results" / "ei" / "G2" / "round_5" / "logs" / "rounds.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in rounds[1:]] == ["0", "1", "2", "3", "4", "5"], rounds  # round 0 = the start
    check_plots_diff(work, run)
    check_experiments_table(run)
    # back to the committed lr: each GRPO stage is restored from DVC's run cache, with the run record and the timings
    # of the run that made its outputs (they are outputs of it), so the wall-clock figure keeps its data
    r = run("dvc", "exp", "run", "-S", "profile=smoke")
    ok(r)
    assert "Stage 'grpo@reinforce_baseline' is cached - skipping run" in r.stdout, r.stdout
    assert {name: (record / name).read_text() for name in made} == made
    ok(run("dvc", "repro", "--force", "--single-item", "plots"))
    curves = read_log(work / "reports" / "curves" / "grpo_validation.csv")
    walls = [row["wall_s"] for row in curves if row["run"] == "reinforce_baseline"]
    assert len(walls) >= 2 and all(isinstance(w, (int, float)) for w in walls) and walls[-1] > 0, curves
    # the plotted wall-clock is the restored run's own (issue 64 saw 1281.8 s plotted beside 738.3 s in its record)
    timed = [row["perf/wall_s"] for row in read_log(record / "timing_eval.csv")]
    assert walls == pytest.approx(timed, abs=0.05), (walls, timed)
    # from the baseline again, the zero-shot eval's params rerun only the zero-shot eval (and the plots that read it)
    assert run("git", "checkout", "--", ".").returncode == 0
    ok(run("dvc", "checkout"))
    r = run("dvc", "exp", "run", "-S", "eval.max_tokens=12")
    ok(r)
    assert ran_stages(r) - {"check_params"} == {"baseline_eval", "plots"}, ran_stages(r)
    check_readme_recipes(work, run)
    check_seed_replicates(work, run)


def check_experiments_table(run) -> None:
    """`python -m tools.exps`, the README's comparison as the README types it: the baseline experiment and the new
    one, the param that differs, and the GRPO runs' accuracy with its interval, in 120 columns (every run of the
    smoke profile does not fit: those whose accuracy is the same in every row are left out, the changed family's
    runs kept when none differs), then with --family grpo every GRPO run."""
    r = run(sys.executable, "-m", "tools.exps")
    ok(r)
    lines = r.stdout.splitlines()
    assert "grpo.lr" in lines[0] and re.search(r"grpo/\w+ acc \(95%\)", lines[0]), r.stdout
    rows = {line.split()[0]: line for line in lines[1:] if not line.startswith("(")}
    assert "baseline" in rows and any("3e-06" in line for line in rows.values()), r.stdout
    assert all(re.search(r"\d\.\d{3} \(\d\.\d{3}–\d\.\d{3}\)", rows[name]) for name in rows), r.stdout
    assert max(map(len, lines)) <= 120
    r = run(sys.executable, "-m", "tools.exps", "--family", "grpo")
    ok(r)
    lines = r.stdout.splitlines()
    assert "grpo.lr" in lines[0] and "grpo/reinforce_baseline acc (95%)" in lines[0], r.stdout
    rows = {line.split()[0]: line for line in lines[1:]}
    assert "baseline" in rows and any("3e-06" in line for line in rows.values()), r.stdout
    assert all(re.search(r"\d\.\d{3} \(\d\.\d{3}–\d\.\d{3}\)", rows[name]) for name in rows), r.stdout
    assert max(map(len, lines)) <= 120


def check_plots_diff(work: Path, run) -> None:
    """`dvc plots diff` is one page of a few figures, every run of both revisions overlaid, that works offline; each
    run's dvclive curves stay reachable by name."""
    r = run("dvc", "plots", "diff", "baseline", "--json")  # the README's
    ok(r)
    plots = json.loads(r.stdout)["data"]
    assert len(plots) <= 8 and not [k for k in plots if "/live/" in k], sorted(plots)
    accuracy = plots["reports/curves/grpo_validation.csv"]
    values = [v for e in accuracy for v in e["content"]["data"]["values"]]
    assert {v["rev"] for v in values} == {"baseline", "workspace"}
    assert {v["run"] for v in values} == {"reinforce_baseline", "no_baseline", "clip_offpolicy"}
    ok(run("dvc", "plots", "diff", "baseline", "-o", str(work.parent / "page")))
    page = (work.parent / "page" / "index.html").read_text()
    assert "vegaEmbed" in page and "cdn.jsdelivr" not in page and "<script src=" not in page  # no download
    one = "results/grpo/reinforce_baseline/live/plots/metrics/eval/accuracy.tsv"
    r = run("dvc", "plots", "show", one, "--json")
    ok(r)
    assert one in json.loads(r.stdout)["data"]
    # the README's `dvc plots show -x step <file>`: an off-policy run's evaluations at their optimizer steps (0, 2, 4),
    # where DVC would number the rows (0, 1, 2) without -x (issue 64)
    off = "results/grpo/clip_offpolicy/live/plots/metrics/eval/accuracy.tsv"
    steps = [int(line.split()[0]) for line in (work / off).read_text().splitlines()[1:]]
    r = run("dvc", "plots", "show", "-x", "step", off, "--json")
    ok(r)
    drawn = [int(v["step"]) for v in json.loads(r.stdout)["data"][off][0]["content"]["data"]["values"]]
    assert drawn == steps and steps != list(range(len(steps))), (drawn, steps)


def check_rl_moved_the_weights(work: Path) -> None:
    """Issue 58: the smoke profile's RL stages train (its lenient training reward, rewards/examples.py, is earned in
    part by chance): every EI round's and GRPO run's model differs from the policy it started from, so the reruns
    compared byte for byte below, and the tests that resume these stages, compare weights that moved."""

    def weights(name: str) -> str:
        return tree_digest(work / "models" / name)["model.safetensors"]

    start = weights("sft_filtered")  # ei.init_policy and grpo.init_policy
    rounds = [f"ei_G2/round_{k}" for k in range(1, 6)]
    moved = [weights(m) for m in [*rounds, "grpo_reinforce_baseline", "grpo_no_baseline", "grpo_clip_offpolicy"]]
    assert start not in moved and len(set(moved)) == len(moved), moved
    rows = read_log(work / "results" / "grpo" / "reinforce_baseline" / "logs" / "train.csv")
    assert any(float(r["train/grad_norm"]) > 0 for r in rows), rows


def check_grader_audit(work: Path) -> None:
    """Every GRPO step, EI round and validation logs the grader audit (a5core.grader.audit), dvclive plots it, and
    each validation keeps its top-reward completions with the audit's verdicts."""
    from a5core.grader.audit import AUDIT_NAMES
    from a5core.run.history import read_log, read_rows

    grpo = work / "results" / "grpo" / "reinforce_baseline"
    train, evals = read_rows(grpo / "logs", "train"), read_rows(grpo / "logs", "eval")
    assert train and all({f"rollout/{n}" for n in AUDIT_NAMES} <= row.keys() for row in train), train[0].keys()
    assert all({f"eval/{n}" for n in AUDIT_NAMES} <= row.keys() for row in evals), evals[0].keys()
    assert all(0.0 <= row["rollout/audit_vs_strict"] <= 1.0 for row in train)
    assert (grpo / "live" / "plots" / "metrics" / "rollout" / "audit_unconfirmed.tsv").exists()
    shown = [json.loads(line) for line in (grpo / "logs" / "completions.jsonl").read_text().splitlines()]
    top = [c for c in shown if c["shown"] == "top_reward"]
    assert top and all("verified" in c and "strict_reward" in c for c in top)
    assert {c["step"] for c in top} == {r["step"] for r in evals[1:]}  # at every validation the run made (step 0's
    # is the starting policy's saved record)
    rounds = read_log(work / "results" / "ei" / "G2" / "round_2" / "logs" / "rounds.csv")
    assert all("rollout/audit_unconfirmed" in row for row in rounds[1:]), rounds[-1].keys()


def artifacts(work: Path) -> dict[str, str]:
    return {
        f"{top}/{k}": v for top in ("models", "data", "results", "reports") for k, v in tree_digest(work / top).items()
    }


CLONE2_OUTPUTS = ("models/base/", "data/prepared/", "results/baseline/")  # what `dvc repro baseline_eval` writes


def check_reruns_change_nothing(work: Path, run, tmp_path: Path) -> None:
    """Every output is a pure function of its inputs: a forced rerun writes the same bytes and invalidates nothing
    below it, a comment or docstring edit reruns nothing but code_hashes (`check_code_edits`), and a second clone of
    the same commit writes the same artifacts (protocol hashes included)."""
    before = artifacts(work)
    for stage in ("prepare_math", "sft@filtered", "ei_round_1@G2"):
        r = run("dvc", "repro", "--single-item", "--force", stage)
        ok(r)
        assert ran_stages(r) == {stage}, ran_stages(r)
        assert "up to date" in run("dvc", "status").stdout, (stage, run("dvc", "status").stdout)
        changed = {k for k in before.keys() | artifacts(work).keys() if before.get(k) != artifacts(work).get(k)}
        assert not changed, (stage, sorted(changed))
    assert json.loads((work / "run_records" / "ei" / "G2" / "round_1" / "run_record.json").read_text())["machine"]
    check_code_edits(work, run)
    other, run2 = scratch_repo(tmp_path / "clone2", "smoke")
    ok(run2("dvc", "repro", "baseline_eval"))
    theirs = {k: v for k, v in artifacts(other).items() if k.startswith(CLONE2_OUTPUTS)}
    assert {"results/baseline/validation.json", "models/base/provenance.json"} <= theirs.keys()
    assert all(before[k] == v for k, v in theirs.items()), sorted(k for k in theirs if before.get(k) != theirs[k])


def check_code_edits(work: Path, run) -> None:
    """Issue 60, item 2: a docstring and a comment edited in every package, rewards/ and every stage script rerun
    only code_hashes (its files unchanged), and `dvc status` is then clean; an executed line added to a5core/report
    reruns exactly the stages that run that package (plots), and putting it back reruns them again."""
    files = [*sorted((work / "a5core").glob("*/__init__.py")), work / "rewards" / "__init__.py"]
    files += sorted((work / "stages").glob("*.py"))
    originals = {f: f.read_text() for f in files}
    for f, text in originals.items():
        assert text.startswith('"""'), f
        f.write_text(text.replace('"""', '"""Edited. ', 1) + "# a comment-only edit\n")
    r = run("dvc", "repro")
    ok(r)
    assert ran_stages(r) == {"code_hashes"} and "0 package(s) whose executed code changed" in r.stdout, r.stdout
    assert "up to date" in run("dvc", "status").stdout
    summary = work / "a5core" / "report" / "summary.py"
    originals[summary] = summary.read_text()
    summary.write_text(originals[summary] + "EXECUTED = 1\n")
    r = run("dvc", "repro")
    ok(r)
    assert ran_stages(r) == {"code_hashes", "plots"}, ran_stages(r)
    for f, text in originals.items():
        f.write_text(text)
    r = run("dvc", "repro")
    ok(r)
    assert ran_stages(r) == {"code_hashes", "plots"}, ran_stages(r)
    assert "up to date" in run("dvc", "status").stdout


def check_stage_profile(work: Path, run) -> None:
    """bench/stage_profile.py: each stage's phases add up to its process time, the timers fire where the stage works,
    and the workspace is untouched (the stages run in a sandbox)."""

    def listing() -> dict[str, int]:
        skip = {".git", ".dvc", "__pycache__"}
        return {str(p): p.stat().st_mtime_ns for p in work.rglob("*") if not skip & set(p.relative_to(work).parts)}

    out, before = work.parent / "stage_profile.json", listing()
    ok(run(sys.executable, "bench/stage_profile.py", "--stages", "sft@8", "grpo@reinforce_baseline", "--out", str(out)))
    assert listing() == before
    profile = json.loads(out.read_text())
    for name, r in profile.items():
        s = r["seconds"]
        stage_phases = sum(v for k, v in s.items() if not k.startswith("dvc:"))
        # process start is read from /proc in 10 ms ticks
        assert abs(stage_phases - r["total_s"]) < 1e-6 and s["other"] >= 0 and r["total_s"] <= r["wall_s"] + 0.05
        assert s["imports"] > 0 and s["model load"] > 0 and s["evaluation"] > 0 and s["training"] > 0, (name, s)
    assert profile["grpo@reinforce_baseline"]["seconds"]["generation"] > 0
    assert profile["grpo@reinforce_baseline"]["seconds"]["grading"] > 0
    r = run("dvc", "status")
    assert "up to date" in r.stdout, r.stdout


def check_seed_replicates(work: Path, run) -> None:
    """`replicates` adds one stage per listed SFT or GRPO run and seed (EI: a chain of rounds), and reruns nothing that
    ran; the summary gives each run's mean over its seeds with the hierarchical interval, and tools.ablations compares
    the means."""
    sets = [
        "replicates.seeds=[1]",
        "replicates.sft_runs=[full]",
        "replicates.ei_runs=[G2]",
        "replicates.grpo_runs=[reinforce_baseline,no_baseline]",
    ]
    r = run("dvc", "exp", "run", *(arg for s in sets for arg in ("-S", s)))
    ok(r)
    replicas = {"sft_replicate@full-1", "grpo_replicate@reinforce_baseline-1", "grpo_replicate@no_baseline-1"}
    replicas |= {f"ei_replicate_{k}@G2-1" for k in range(1, 6)}
    # baseline_eval too: `dvc exp run` composes params.yaml from conf/ afresh, undoing the workspace's eval.max_tokens
    assert ran_stages(r) - {"check_params"} == replicas | {"plots", "baseline_eval"}, ran_stages(r)
    folder = work / "results" / "grpo" / "no_baseline" / "seed_1"
    record = work / "run_records" / "grpo_replicate" / "no_baseline" / "seed_1" / "run_record.json"
    assert read_run_record(record)["stage"] == "grpo_replicate@no_baseline-1"
    assert json.loads((work / "models" / "grpo_no_baseline_seed1" / "provenance.json").read_text())
    assert json.loads((folder / "validation.json").read_text())["per_question"]
    sft = [json.loads((work / "results" / "sft" / "full" / f / "details.json").read_text()) for f in ("", "seed_1")]
    assert sft[0]["examples"] == sft[1]["examples"]  # the same traces, in another seed's order
    ei = work / "results" / "ei" / "G2" / "seed_1" / "round_5"
    record = work / "run_records" / "ei_replicate" / "G2" / "seed_1" / "round_5" / "run_record.json"
    assert read_run_record(record)["stage"] == "ei_replicate_5@G2-1"
    assert [int(row["round"]) for row in read_log(ei / "logs" / "rounds.csv")] == list(range(6))  # its own chain
    rollouts = [work / "results" / "ei" / "G2" / f / "round_1" / "rollouts.parquet" for f in ("", "seed_1")]
    responses = [pq.read_table(path).column("response").to_pylist() for path in rollouts]
    assert responses[0] != responses[1]  # another seed's rollouts
    summary = (work / "reports" / "summary.md").read_text()
    assert "Seed replicates" in summary and "| GRPO | no_baseline | 2 | " in summary and "| SFT | full | 2 |" in summary
    assert "| EI | G2 | 2 |" in summary
    ok(run(sys.executable, "-m", "tools.ablations", "--out", str(work.parent / "ablations.md")))
    rows = (work.parent / "ablations.md").read_text()
    assert "| grpo_no_baseline − grpo_reinforce_baseline |" in rows and "| 2 |" in rows, rows
    assert "Power (EI, 2 seeds)" in rows, rows


def check_readme_recipes(work: Path, run) -> None:
    """The README's commands for comparing experiments, cleaning the cache and sharing models."""
    r = run("dvc", "exp", "show", "--only-changed", "--csv")
    ok(r)
    assert "grpo.lr" in r.stdout.splitlines()[0] and "eval.max_tokens" in r.stdout.splitlines()[0]
    r = run("dvc", "exp", "show", "--csv", "--drop", ".*", "--keep", "Experiment|grpo\\.lr|results/grpo/.*accuracy")
    ok(r)
    assert len(r.stdout.splitlines()[0].split(",")) <= 12, r.stdout.splitlines()[0]
    ok(run(sys.executable, "-m", "tools.ablations", "--out", str(work.parent / "ablations.md")))
    rows = (work.parent / "ablations.md").read_text()
    assert "| grpo_no_baseline − grpo_reinforce_baseline |" in rows and "| sft_full − sft_8 |" in rows, rows
    r = run("dvc", "metrics", "show")
    ok(r)
    assert max(len(line) for line in r.stdout.splitlines()) <= 200
    ok(run("dvc", "gc", "--workspace", "--all-experiments", "-f"))
    assert (work / "models" / "grpo_reinforce_baseline" / "model.safetensors").exists()
    ok(run("dvc", "remote", "add", "-d", "store", str(work.parent / "remote")))
    ok(run("dvc", "push"))
    assert list((work.parent / "remote").rglob("*"))
