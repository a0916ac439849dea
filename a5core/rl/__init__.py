"""rl: the methods. May import every package above it in a5core/__init__.py's list (base/ to run/).

- losses.py (SFT and policy-gradient losses, normalizers), advantages.py (group-normalized advantages)
- rl_options.py: the RL options beyond the handout (clip-higher, overlong, KL, TIS, dynamic sampling)
- sft.py (SFT), ei.py (Expert Iteration), dpo.py (its loss)
- grpo_config.py (the `grpo` section), grpo_update.py (the update math), grpo.py (the loop)
- train_reward.py: the reward each training stage trains on
"""
