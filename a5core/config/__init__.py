"""config: the params sections every package shares, and the prompts. May import base/ and grader/.

- sections.py: `model`, `data`, `generation`, `eval`/`validation`, `logging`, `replicates` (and the run entries of
  `sft_runs`); the sections of one method live beside it (rl/sft.py, rl/ei.py, rl/grpo_config.py,
  model/distributed.py), and checks/params.py checks them all
- prompts.py: the handout's prompt templates, each with its reward function and stop strings
"""
