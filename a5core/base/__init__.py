"""base: the building blocks every package may use. Imports nothing from a5core outside base/.

- typed.py: typed sections (`Section`, `Bound`, `from_dict`, the YAML reader); errors.py: `ProjectError`
- records.py: the rows passed between stages and steps (problems, SFT traces, graded samples, rollout batches)
- artifacts.py: Parquet/JSON written atomically with provenance; run_record.py: the volatile facts of a stage run
- seeds.py: `derive_seed`; stats.py: intervals, bootstrap, paired tests; progress.py: progress bars, a run's clock
"""
