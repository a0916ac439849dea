"""report: what runs show together. May import base/ to rl/.

- replicates.py: seed replicates (the `replicates` section) and their tests
- summary.py: reports/summary.md; plots.py: the figures; curves.py: the tables `dvc plots` draws
"""
