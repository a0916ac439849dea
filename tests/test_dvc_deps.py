"""dvc.yaml is honest: each stage depends on exactly the a5core packages its script imports (their hash files in
code_hashes/, the code_hashes stage's output, which alone depends on the source folders), each stage that grades on
rewards/ (custom reward functions), each params section is read by the stages that list it, the Expert
Iteration rounds form one chain, every training stage's live plots are declared, metrics and plots are kept in git
(visible on a fresh clone) and every other output is cached (the run cache)."""

import pytest
import yaml

from tests.support.profiles import PROFILES, composed
from tools.dag import WIDTH, expand, load_spec, render
from tools.stage_deps import ROOT, expected_code


def _stages() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def _body(stage: dict) -> dict:
    return stage.get("do", stage)


def _script(body: dict) -> str:
    return next(word for word in body["cmd"].split() if word.endswith(".py"))  # after `python` or the launcher


def _code(body: dict) -> list[str]:
    """The code a stage depends on, through its hash files: stages/<name>, a5core/<package>, rewards."""
    hashes = [d for d in body["deps"] if d.startswith("code_hashes/")]
    return [d.removeprefix("code_hashes/").removesuffix(".txt") for d in hashes]


def _stages_but_hashes() -> dict:
    return {name: stage for name, stage in _stages().items() if name != "code_hashes"}


def test_only_the_code_hashes_stage_depends_on_source_folders():
    """The code_hashes stage depends on a5core/, rewards/ and stages/ and writes code_hashes/ (in git, so a fresh clone
    has it); every other stage depends on the hash files alone, so a docstring or comment edit reruns none of them."""
    hashes = _stages()["code_hashes"]
    assert hashes["deps"] == ["stages/code_hashes.py", "a5core", "rewards", "stages"]
    assert hashes["outs"] == [
        {"code_hashes": {"cache": False, "persist": True}}
    ]  # kept: a file is rewritten only on a change
    sources = ("a5core", "rewards", "stages/")
    for name, stage in _stages_but_hashes().items():
        assert not [d for d in _body(stage)["deps"] if d.startswith(sources)], name


def test_each_stage_depends_on_exactly_the_packages_it_imports():
    """A stage's a5core deps are folders, exactly those of the packages its script (and the launcher) load: a
    package missing would let an edit there go unseen; one too many reruns the stage for nothing."""
    for name, stage in _stages_but_hashes().items():
        body = _body(stage)
        script = _script(body)
        listed = [d.removeprefix("a5core/") for d in _code(body) if d.startswith("a5core")]
        assert script.removesuffix(".py") in _code(body), f"{name}: its script {script} is not a dep"
        expected = expected_code(body["cmd"])
        assert listed == expected, f"{name}: `code:` in dvc.spec.yaml should be {expected} (python -m tools.stage_deps)"


def test_plots_stage_does_not_depend_on_training_code_and_vice_versa():
    """The narrow invalidation the layers give: an edit of the plots reruns no training stage, an edit of GRPO no
    evaluation of the base model and no plots; an edit of the params checker only check_params."""
    deps = {name: set(_code(_body(s))) for name, s in _stages_but_hashes().items()}
    assert "a5core/rl" not in deps["plots"] and not any("a5core/report" in d for n, d in deps.items() if n != "plots")
    assert "a5core/rl" not in deps["baseline_eval"] and "a5core/rl" in deps["grpo"]
    assert [n for n, d in deps.items() if "a5core/checks" in d] == ["check_params"]
    assert not any(d in ("a5core", "a5core/") for ds in deps.values() for d in ds)  # never the whole library


def test_every_stage_that_grades_depends_on_the_custom_rewards():
    """A reward function named in params lives in rewards/ (the params check refuses one elsewhere), and every stage
    that grades (its params name a reward: validation's, eval's or a training reward_fn) depends on that folder, and
    so does check_params, which calls a custom reward on the reward contract's pairs: editing a custom reward checks
    it again and reruns the stages that grade."""
    for name, stage in _stages_but_hashes().items():
        body = _body(stage)
        params = body.get("params", [])
        whole = any(isinstance(p, dict) and "params.yaml" in p for p in params)  # check_params: the reward contract
        names = [p for p in params if isinstance(p, str)]
        grades = whole or any(p.split(".")[0] in ("validation", "eval") or p.endswith("reward_fn") for p in names)
        assert ("rewards" in _code(body)) == grades, name


def test_settings_that_change_no_output_key_no_stage():
    """Issue 58: logging.tracker (TensorBoard's files are no output) and logging.console_every (the console) are in no
    stage's params, so switching them reruns nothing but check_params (tests/test_smoke_dag.py runs that); the logging
    keys that change outputs (completions, save_every) are listed by every training stage."""
    for name, stage in _stages().items():
        params = [p for p in _body(stage).get("params", []) if isinstance(p, str)]
        assert not {"logging", "logging.tracker", "logging.console_every"} & set(params), (name, params)
        if "distributed" in params:  # a training stage
            assert {"logging.completions", "logging.save_every"} <= set(params), (name, params)


def test_eval_params_belong_to_the_zero_shot_eval_only():
    for name, stage in _stages().items():
        params = [p.split(".")[0] for p in _body(stage).get("params", []) if isinstance(p, str)]
        assert ("eval" in params) == (name == "baseline_eval"), name


def _outs(body: dict) -> dict:
    """Every declared output of a stage (outs, metrics, plots) -> its options."""
    out = {}
    for kind in ("outs", "metrics", "plots"):
        for entry in body.get(kind, []):
            out.update(entry if isinstance(entry, dict) else {entry: {}})
    return {path: opts or {} for path, opts in out.items()}


def test_metrics_and_plots_are_in_git_and_every_other_output_is_run_cached():
    for name, stage in _stages().items():
        body = _body(stage)
        in_git = set(_outs({k: v for k, v in body.items() if k in ("metrics", "plots")}))
        for path, opts in _outs(body).items():
            # DVC (3.67, Stage.run) skips the run cache of a stage with a cache: false output that is not a metric or
            # plot; the grid over machines needs the run cache. The plots stage is cheap and writes the summary to git,
            # the code_hashes stage (cheaper still) the hash files every other stage depends on.
            uncached = path in in_git or name in ("plots", "code_hashes")
            assert uncached == (opts.get("cache") is False), (
                f"{name}: {path} should {'not ' if not uncached else ''}be cache: false"
            )
        assert "plots" not in body, name  # the page `dvc plots` draws is dvc.yaml's top-level plots
        if name in ("sft", "grpo") or name.startswith("ei_round_"):
            assert [p for p in body["outs"] if isinstance(p, str) and p.endswith("/live/plots")], name


def test_ei_rounds_form_a_chain_and_the_plots_read_the_last_round():
    stages = _stages()
    rounds = sorted(int(name.rsplit("_", 1)[1]) for name in stages if name.startswith("ei_round_"))
    assert rounds == list(range(1, len(rounds) + 1)) and len(rounds) >= 1, rounds
    for k in rounds:  # round k trains round k-1's model, extends its history and keeps its initial validation
        body = stages[f"ei_round_{k}"]["do"]
        cmd, deps = body["cmd"].split(), body["deps"]
        model = cmd[cmd.index("--model") + 1]
        assert cmd[cmd.index("--round") + 1] == str(k) and model in deps
        assert f"models/ei_${{key}}/round_{k}" in body["outs"]
        if k == 1:
            assert model == "models/${ei.init_policy}" and "--history" not in cmd
        else:
            prev = f"results/ei/${{key}}/round_{k - 1}"
            assert model == f"models/ei_${{key}}/round_{k - 1}"
            assert {f"{prev}/logs/rounds.csv", f"{prev}/initial.json"} <= set(deps)
            assert cmd[cmd.index("--history") + 1] == f"{prev}/logs/rounds.csv"
    last = f"round_{rounds[-1]}"
    assert f"--ei results/ei/{{run}}/{last} " in stages["plots"]["cmd"]


def test_dvc_yaml_is_written_from_the_spec_and_reads_back_as_the_same_stages():
    """dvc.yaml is what `python -m tools.dag` writes from dvc.spec.yaml (edit the spec, never dvc.yaml), every line
    fits in 120 characters, and the layout parses back to exactly the stages the generator built."""
    text = (ROOT / "dvc.yaml").read_text()
    assert text == render(load_spec()), "dvc.yaml is stale: run python -m tools.dag"
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    stages, _ = expand(load_spec())
    assert _stages() == {name: stage for name, (_, stage) in stages.items()}


def test_the_generator_leaves_out_flags_and_deps_that_a_round_does_not_define():
    spec = {
        "header": "h",
        "stages": {
            "r": {
                "rounds": 2,
                "first": {"m": "models/start"},
                "later": {"m": "models/r<prev>", "h": "logs/r<prev>.csv"},
                "code": ["base", "rl"],
                "cmd": "python stages/ei_round.py --round <k> --model <m> --history <h> --out models/r<k>",
                "deps": ["stages/ei_round.py", "<m>", "<h>"],
            }
        },
    }
    stages, _ = expand(spec)
    first, second = stages["r_1"][1], stages["r_2"][1]
    assert first["cmd"] == "python stages/ei_round.py --round 1 --model models/start --out models/r1"
    assert second["cmd"] == (
        "python stages/ei_round.py --round 2 --model models/r1 --history logs/r1.csv --out models/r2"
    )
    code = ["code_hashes/stages/ei_round.txt", "code_hashes/a5core/base.txt", "code_hashes/a5core/rl.txt"]
    assert first["deps"] == [*code, "models/start"]
    assert second["deps"] == [*code, "models/r1", "logs/r1.csv"]
    spec["stages"]["rep"] = {**spec["stages"]["r"], "rounds": 3}  # a replicate chain must end where the runs do
    with pytest.raises(ValueError, match=r"rounds:. stages disagree \(\[2, 3\]\)"):
        expand(spec)


def test_ei_replicates_are_chains_of_their_own_over_the_run_x_seed_matrix():
    stages = _stages()
    rounds = sorted(int(name.rsplit("_", 1)[1]) for name in stages if name.startswith("ei_replicate_"))
    assert rounds == sorted(int(n.rsplit("_", 1)[1]) for n in stages if n.startswith("ei_round_"))
    for k in rounds:
        body = stages[f"ei_replicate_{k}"]
        assert body["matrix"] == {"run": "${replicates.ei_runs}", "seed": "${replicates.seeds}"}
        cmd = body["cmd"].split()
        assert cmd[cmd.index("--seed") + 1] == "${item.seed}" and cmd[cmd.index("--round") + 1] == str(k)
        own = f"models/ei_${{item.run}}_seed${{item.seed}}/round_{k}"
        assert own in body["outs"] and cmd[cmd.index("--out") + 1] == own
        prev = "models/${ei.init_policy}" if k == 1 else f"models/ei_${{item.run}}_seed${{item.seed}}/round_{k - 1}"
        assert cmd[cmd.index("--model") + 1] == prev and prev in body["deps"]


def test_every_profile_has_every_param_a_stage_depends_on():
    """DVC refuses a stage whose `params:` names a key missing from params.yaml ("Parameters ... are missing"), so
    every profile must set every dotted key a stage lists (section names and per-run keys are whole sections)."""
    keys = {
        p for stage in _stages().values() for p in _body(stage).get("params", []) if isinstance(p, str) and "." in p
    }
    keys = {k for k in keys if "$" not in k}
    assert {"model.dtype", "model.autocast"} <= keys
    for profile in PROFILES:
        params = composed(profile)
        missing = [k for k in sorted(keys) if k.split(".")[1] not in (params.get(k.split(".")[0]) or {})]
        assert not missing, (profile, missing)
