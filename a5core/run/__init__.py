"""run: what a training or evaluation run uses around its method, and what it checks before it starts.
May import base/, grader/, config/, data/, model/, generation/.

- evaluation.py: prompts -> generation -> grading -> metrics with intervals
- checkpoint.py: resumable training state, preemption; kept.py: a finished stage's outputs until DVC's cache has them
- history.py: the rows a run logs and its console
- stage_reports.py: the Markdown reports stages write (cases of an evaluation, SFT filtering, EI rounds)
- plan.py: memory and disk plans, and the micro-batch budget `auto` resolves to on CUDA (`python -m a5core.run.plan`)
- preflight.py: refuse a profile this machine cannot run; dvc_stages.py: which stage of dvc.yaml writes which output
"""
