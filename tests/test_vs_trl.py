"""bench/vs_trl.py builds both sides' configs from its own defaults: this project's GRPO section through the params
checker (a renamed field, as `learning_rate` once was, fails here), and TRL's arguments for the same work
(constructed by TRL itself where it is installed; it is no project dependency). bench/grpo_sweep.py's shapes too: the
benches that build a GRPO section from the profile, so that a renamed or refused field fails here, not in a long run."""

import importlib.util

import pytest

from bench import vs_trl


def test_both_sides_configs_build_and_describe_the_same_work():
    args = vs_trl.parse([])
    a5 = vs_trl.a5_config(args)
    trl = vs_trl.trl_kwargs(args, "/tmp/unused")
    assert (a5.lr, a5.group_size, a5.max_tokens, a5.n_grpo_steps) == (
        trl["learning_rate"],
        trl["num_generations"],
        trl["max_completion_length"],
        trl["max_steps"],
    )
    assert a5.micro_batch_size == trl["per_device_train_batch_size"] and a5.min_tokens == 0 and trl["beta"] == 0.0
    assert a5.train_batch_size == a5.rollout_batch_size and trl["num_iterations"] == 1  # on-policy on both sides


@pytest.mark.parametrize("autocast", ["off", "bf16"])
def test_both_sides_train_in_the_precision_asked(autocast):
    """`--autocast` reaches both sides: this project's compute record (what `train_grpo` gets) and TRL's `bf16`."""
    args = vs_trl.parse(["--autocast", autocast])
    assert vs_trl.a5_compute(args).autocast_on == vs_trl.trl_kwargs(args, "/tmp/unused")["bf16"] == (autocast == "bf16")


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="TRL is not installed (pip install trl==1.16.0)")
def test_trl_takes_its_arguments():
    from trl import GRPOConfig

    args = vs_trl.parse([])
    assert GRPOConfig(**vs_trl.trl_kwargs(args, "/tmp/unused")).num_generations == args.group


def test_every_grpo_sweep_shape_is_a_valid_grpo_section():
    """bench/grpo_sweep.py's shapes (issue 57) compose with the default profile into GRPO sections the params checker
    accepts, on-policy unless the shape says otherwise."""
    from a5core.config.sections import from_dict, read_params
    from a5core.rl.grpo import GRPOConfig
    from bench import grpo_sweep

    base = read_params(vs_trl.ROOT / "params.yaml")
    for name, changes in grpo_sweep.SHAPES.items():
        cfg = from_dict(GRPOConfig, grpo_sweep.shape_params(base, name)["grpo"], f"grpo ({name})")
        assert all(getattr(cfg, k) == v for k, v in changes.items()), name
        assert cfg.off_policy == (cfg.loss_type == "grpo_clip"), name
