"""Named runs (`*_runs` dicts of overrides) and the lazy top-level a5core API."""
import subprocess
import sys

import pytest
import yaml

from a5core.config import ConfigError, load_run
from a5core.grpo import GRPOConfig


def _params(tmp_path, runs):
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"grpo": {"n_grpo_steps": 3, "rollout_batch_size": 8, "group_size": 4, "train_batch_size": 8,
                                          "gradient_accumulation_steps": 2}, "grpo_runs": runs}))
    return p


def test_a_run_overrides_the_shared_section(tmp_path):
    p = _params(tmp_path, {"a": {}, "b": {"learning_rate": 3e-6}})
    assert load_run(GRPOConfig, "grpo", "grpo_runs", "a", p).learning_rate == GRPOConfig().learning_rate
    b = load_run(GRPOConfig, "grpo", "grpo_runs", "b", p)
    assert b.learning_rate == 3e-6 and b.n_grpo_steps == 3


def test_run_errors_are_clear(tmp_path):
    p = _params(tmp_path, {"a": {"init_policy": "base"}, "bad": {"loss_type": "ppo"}})
    with pytest.raises(ConfigError, match="init_policy cannot differ per run"):
        load_run(GRPOConfig, "grpo", "grpo_runs", "a", p)
    with pytest.raises(ConfigError, match="has no entry 'zzz'"):
        load_run(GRPOConfig, "grpo", "grpo_runs", "zzz", p)
    with pytest.raises(ConfigError, match="'ppo' is not one of"):
        load_run(GRPOConfig, "grpo", "grpo_runs", "bad", p)


def test_top_level_api_is_lazy_and_complete():
    import a5core

    for name in a5core.__all__:
        assert callable(getattr(a5core, name)), name
    with pytest.raises(AttributeError):
        a5core.not_a_function  # noqa: B018
    # importing a stage helper loads none of the training math (so its DVC deps stay narrow)
    code = "import sys, a5core.stage; print(sorted(m for m in sys.modules if m.startswith('a5core')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "a5core.dpo" not in out and "a5core.losses" not in out, out


def test_params_read_floats_the_way_dvc_writes_them(tmp_path):
    """`dvc exp run -S grpo.learning_rate=3e-6` writes `3e-6`, a string to YAML 1.1 (PyYAML): it must be a float."""
    from a5core.config import read_params

    p = tmp_path / "params.yaml"
    p.write_text("grpo:\n  learning_rate: 3e-6\n  advantage_eps: 1.0e-6\n  cliprange: .2\n  seed: 7\n  prompt: '1e-3'\n")
    g = read_params(p)["grpo"]
    assert g == {"learning_rate": 3e-6, "advantage_eps": 1e-6, "cliprange": 0.2, "seed": 7, "prompt": "1e-3"}
    assert type(g["seed"]) is int
    p.write_text(p.read_text().replace("prompt: '1e-3'", "prompt: r1_zero") + "grpo_runs:\n  a: {}\n")
    assert load_run(GRPOConfig, "grpo", "grpo_runs", "a", p).learning_rate == 3e-6
