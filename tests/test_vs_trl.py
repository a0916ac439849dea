"""bench/vs_trl.py builds both sides' configs from its own defaults: this project's GRPO section through the params
checker (a renamed field, as `learning_rate` once was, fails here), and TRL's arguments for the same work
(constructed by TRL itself where it is installed; it is no project dependency)."""

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


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="TRL is not installed (pip install trl==1.16.0)")
def test_trl_takes_its_arguments():
    from trl import GRPOConfig

    args = vs_trl.parse([])
    assert GRPOConfig(**vs_trl.trl_kwargs(args, "/tmp/unused")).num_generations == args.group
