"""Custom reward functions. A `reward_fn` in params (`grpo`, `ei`, `sft`, `validation`, `eval`) is either a built-in
rule (`a5core.grader:r1_zero_reward_fn`, ...) or a function in this folder, `rewards.<module>:<function>`: every stage
that grades depends on this folder (dvc.yaml), so editing a reward reruns the stages that use it.

The contract: `f(response: str, ground_truth: str)` returns a mapping with `format_reward`, `answer_reward` and
`reward`, each a finite number in [0, 1]. Before any stage runs, the params checker calls it in a grader worker on a
fixed correct and a fixed wrong pair (docs/reward.md); every later call runs in a worker with a time and memory limit.
"""
