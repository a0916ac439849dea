"""Helpers the tests share; no test module imports another, and bench/ imports these, never a test module.

- repos.py: a scratch copy of the working tree as a git repo, and what to check of it (tree digests, stages run).
- profiles.py: the profiles as DVC composes them.  plans.py: QWEN and the full profile's params for the plans.
- loops.py: stand-ins for the training loops' collaborators, the rows they train on, short GRPO runs.
- resume.py: a run straight, killed and resumed (in process or as a stage process), for the caller to compare.
- workspace.py: a smoke copy with valid inputs, and a stage's real command from dvc.yaml.
- hostile_inputs.py, grader_cases.py: hostile LaTeX, data files and Parquet inputs; the grader's case tables.
- slow_grader.py: custom reward functions the grader pool imports by name (`tests.support.slow_grader:<fn>`).
- wheels.py: a minimal valid wheel made by hand (the offline bundle and the GPU sequence's transfer step).

tests/dist_worker.py and tests/dist_vllm_worker.py stay beside the tests: scripts run by path (under torchrun too), not
imported.
"""
