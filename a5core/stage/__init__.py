"""stage: what the scripts in stages/ call. May import every package.

- entry.py: arguments, the pre-flight, the one-line errors, torch setup, row I/O
- training.py: the prologue and epilogue shared by the training stages (sft, ei_round, grpo)
- launch.py: `python -m a5core.stage.launch stages/<x>.py ...` on the `distributed` section's processes
"""
