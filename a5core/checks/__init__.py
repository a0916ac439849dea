"""checks: what the check_params stage and the command-line tools check or forecast before any work; no other stage
imports it. May import every package but stage/.

- params.py: the whole params file (every section, every named run); inputs.py: what the values point at (data
  files, init_policy folders, the reward contract)
- forecast.py: how long the DAG will take (`python -m a5core.checks.forecast`, and the one line per stage that
  a5core/stage/entry.py launches beside each stage)
- unread.py: the changed fields a GRPO, SFT or EI run does not read (check_params says so before anything runs)
"""
