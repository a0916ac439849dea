"""a5core: the library behind the a5 pipeline (CS336 A5: SFT, Expert Iteration, GRPO on math).

Packages, lowest first; each imports only from those above it in this list (tests/test_layers.py):
- base/        typed sections and errors, seeds, artifact I/O, the records between stages, statistics, run records
- grader/      the verified math reward (extract, normalize, parse, compare), in a pool of worker processes
- config/      the params sections every package shares (model, data, generation, eval, logging) and the prompts
- data/        MATH / GSM8K / SFT-trace readers, synthetic problems, the prepare_math split, SFT-trace filtering
- model/       the policy model: loading, tokenization, log-probs, LoRA, precision, micro-batching, optimizer,
               data-parallel processes (the `model` section's settings)
- generation/  the rollout engines (hf, vLLM) behind one interface
- run/         what a run uses: evaluation, checkpoints, history, stage reports, plans, pre-flight
- rl/          the methods: losses, advantages, RL options, SFT, Expert Iteration, GRPO, DPO
- report/      seed replicates, the summary, figures and the tables `dvc plots` draws
- checks/      the params checker (the check_params stage), what values point at, the time forecast
- stage/       what stage scripts call: arguments and checks, the training-stage prologue, the launcher
`a5core.handout` gives the handout's functions under the adapters' names.
"""
