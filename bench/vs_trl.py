"""The same GRPO work through this project's loop and through TRL's GRPOTrainer, on this CPU, in one run.

Same model (a policy folder, default models/sft_filtered), training questions and r1_zero prompts, group size, rollouts
per step, max new tokens, loss (per-sequence token mean, group-normalized advantages with the std, no KL, on policy),
learning rate, AdamW betas and gradient clipping. Neither side stops at a stop string (TRL's generate path takes none),
so both sample `--max-tokens` tokens or until EOS, and both grade with `stop_at_answer_reward`: the response cut after
its first `</answer>`, as a stop string would return it (the handout's rule grades everything after the last `<answer>`,
so text sampled past `</answer>` would make every answer wrong and every advantage 0). Each side runs in its own
process; afterwards both trained policies are validated by this project's evaluator on the same questions with the same
sample seeds, so their accuracies (with 95% intervals) and the paired difference between them are comparable.

    pip install trl==1.16.0   # not a project dependency; its pins agree with requirements/cpu.lock
    python bench/vs_trl.py --steps 5 --out reports/vs_trl.json
    python bench/vs_trl.py --steps 5 --autocast bf16 --out reports/vs_trl_bf16.json

`--autocast bf16`: both sides train with bf16 autocast of the float32 weights (this project's `model.autocast: bf16`;
TRL's `bf16=True`, Accelerate's autocast of the model's forward). This project's rollouts stay float32, as its
`generation.dtype: auto` is on CPUs. Validation is float32 for both.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STOP = "</answer>"


def stop_at_answer_reward(response: str, ground_truth) -> dict:
    """r1_zero_reward_fn on the response as the `</answer>` stop string would have returned it."""
    from a5core.grader import r1_zero_reward_fn

    cut = response.find(STOP)
    return r1_zero_reward_fn(response if cut < 0 else response[: cut + len(STOP)], ground_truth)


def questions(path: str, n: int) -> list[dict]:
    from a5core.base.artifacts import read_parquet

    return read_parquet(path).to_pylist()[:n]


def a5_config(args):
    """This project's GRPO section for the comparison (checked as params are: a renamed field fails here)."""
    from a5core.config.sections import from_dict
    from a5core.rl.grpo import GRPOConfig

    fields = {
        "n_grpo_steps": args.steps,
        "lr": args.lr,
        "rollout_batch_size": args.rollouts,
        "group_size": args.group,
        "train_batch_size": args.rollouts,
        "gradient_accumulation_steps": args.accum,
        "max_tokens": args.max_tokens,
        "eval_every": 0,
        "checkpoint_every": 0,
    }
    return from_dict(GRPOConfig, fields, "grpo")


def trl_kwargs(args, output_dir: str) -> dict:
    """TRL 1.16's GRPOConfig arguments for the same work (the module docstring lists what is matched)."""
    return {
        "output_dir": output_dir,
        "learning_rate": args.lr,
        "num_generations": args.group,
        "per_device_train_batch_size": args.rollouts // args.accum,
        "gradient_accumulation_steps": args.accum,
        "max_completion_length": args.max_tokens,
        "max_steps": args.steps,
        "temperature": 1.0,
        "top_p": 1.0,
        "beta": 0.0,
        "loss_type": "grpo",
        "scale_rewards": "group",
        "num_iterations": 1,
        "adam_beta2": 0.95,
        "max_grad_norm": 1.0,
        "weight_decay": 0.0,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "use_cpu": True,
        "bf16": args.autocast == "bf16",
        "gradient_checkpointing": False,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "seed": 0,
    }


def a5_compute(args):
    """This project's compute settings for the comparison: the stage's own resolution of `model.autocast` (`off`:
    float32, the reference path; `bf16`: autocast, as the default profile's `auto` is on a CPU with AVX512-BF16)."""
    from a5core.config.sections import GenerationConfig, ModelConfig
    from a5core.model.compute import Compute

    return Compute.of(ModelConfig(autocast=args.autocast), "cpu", generation=GenerationConfig(batch_size=64))


def run_a5(args, out: Path) -> dict:
    """This project's loop (hf backend, the real grader pool); returns seconds per step."""
    from a5core.config import prompts
    from a5core.config.sections import GenerationConfig
    from a5core.generation import make_backend
    from a5core.grader import GraderPool
    from a5core.model.loading import load_policy
    from a5core.model.microbatch import Cut
    from a5core.rl.grpo import train_grpo
    from a5core.run.history import RunHistory

    prompts.STOPS["r1_zero"] = ()  # as TRL: no stop string (see the module docstring)
    compute = a5_compute(args)  # the precision of TRL's side (its bf16 argument)
    policy, tok = load_policy(args.model, "cpu", "float32")
    backend = make_backend(GenerationConfig(batch_size=64), args.model, policy, tok, seed=0, bf16=False, cut=Cut())
    cfg = a5_config(args)
    # the worker processes import this file as `vs_trl` (its folder is sys.path[0] of the script they were spawned from)
    pool = GraderPool(reward_fn="vs_trl:stop_at_answer_reward")
    with RunHistory(out / "live", out / "logs", name="a5", total_steps=args.steps) as history, pool:
        t0 = time.monotonic()
        train_grpo(
            policy,
            tok,
            backend,
            train_rows=questions(args.train, 256),
            cfg=cfg,
            pool=pool,
            validate=lambda p, full: _NoEval(),
            history=history,
            initial={"metrics": {"eval/accuracy": 0.0}},
            compute=compute,
        )
        seconds = time.monotonic() - t0
    policy.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    return {"seconds": seconds, "seconds_per_step": seconds / args.steps}


class _NoEval:
    """Validation is done afterwards, for both sides alike."""

    metrics = {"eval/accuracy": 0.0}
    samples: list = []
    entropies: list = []


def run_trl(args, out: Path) -> dict:
    """TRL's GRPOTrainer on the CPU with the same settings; returns seconds per step."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from a5core.config.prompts import build_prompt

    # The saved generation config stops at </answer> with `stop_strings`, which transformers' generate only accepts
    # together with a tokenizer; TRL calls generate without one, so its copy of the model has no stop string.
    model = out / "init"
    shutil.copytree(args.model, model)
    gen = json.loads((model / "generation_config.json").read_text())
    gen.pop("stop_strings", None)
    (model / "generation_config.json").write_text(json.dumps(gen))
    rows = questions(args.train, 256)
    data = Dataset.from_list([{"prompt": build_prompt(r["problem"]), "answer": r["answer"]} for r in rows])

    def reward(prompts, completions, answer, **kwargs):
        return [stop_at_answer_reward(c, a)["reward"] for c, a in zip(completions, answer)]

    cfg = GRPOConfig(**trl_kwargs(args, str(out / "trl")))
    trainer = GRPOTrainer(model=str(model), reward_funcs=[reward], args=cfg, train_dataset=data)
    t0 = time.monotonic()
    trainer.train()
    seconds = time.monotonic() - t0
    trainer.save_model(str(out / "model"))
    trainer.processing_class.save_pretrained(out / "model")
    return {"seconds": seconds, "seconds_per_step": seconds / args.steps}


def validate(model: str, validation: str, samples: int) -> dict:
    """This project's evaluator on a trained policy: accuracy, its interval and per-question scores."""
    from a5core.config.sections import EvalConfig, GenerationConfig
    from a5core.generation import make_backend
    from a5core.grader import GraderPool
    from a5core.model.loading import load_policy
    from a5core.model.microbatch import Cut
    from a5core.run.evaluation import evaluate_policy

    policy, tok = load_policy(model, "cpu", "float32")
    cfg = EvalConfig(samples_per_example=samples, max_tokens=64, grader_workers=1)
    with GraderPool() as pool:
        result = evaluate_policy(
            policy,
            tok,
            make_backend(GenerationConfig(batch_size=64), model, policy, tok, seed=0, bf16=False, cut=Cut()),
            questions(validation, 10_000),
            cfg,
            pool,
            progress=False,
            cut=Cut(),
        )
    return {
        **{k: result.metrics[k] for k in ("eval/accuracy", "eval/accuracy_lo", "eval/accuracy_hi", "count/questions")},
        "per_question": result.per_question,
    }


def max_weight_change(start: str, trained: Path) -> float:
    """Largest absolute change of any weight: 0.0 means the run did not learn (for example, every advantage was 0)."""
    from safetensors.torch import load_file

    before = load_file(str(Path(start) / "model.safetensors"))
    after = load_file(str(next(trained.glob("*.safetensors"))))
    return max(float((before[k].float() - after[k].float()).abs().max()) for k in before if k in after)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/sft_filtered")
    parser.add_argument("--train", default="data/prepared/train.parquet")
    parser.add_argument("--validation", default="data/prepared/validation.parquet")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rollouts", type=int, default=16)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--samples", type=int, default=4, help="samples per validation question (avg@k)")
    parser.add_argument("--autocast", choices=["off", "bf16"], default="off", help="both sides' training precision")
    parser.add_argument("--out", default="reports/vs_trl.json")
    parser.add_argument("--side", choices=["a5", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> None:
    args = parse()
    if args.side:  # one side, in its own process
        result = (run_a5 if args.side == "a5" else run_trl)(args, Path(args.work))
        print(json.dumps(result))
        return
    from a5core.base.stats import paired_difference

    work = Path(tempfile.mkdtemp(prefix="vs_trl."))
    report = {"settings": {k: v for k, v in vars(args).items() if k not in ("side", "work")}}
    for side in ("a5", "trl"):
        cmd = [sys.executable, __file__, *sys.argv[1:], "--side", side, "--work", str(work / side)]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"{side} failed:\n{out.stderr[-3000:]}")
        report[side] = {
            **json.loads(out.stdout.strip().splitlines()[-1]),
            **validate(str(work / side / "model"), args.validation, args.samples),
            "max_weight_change": max_weight_change(args.model, work / side / "model"),
        }
        print(side, {k: v for k, v in report[side].items() if k != "per_question"}, flush=True)
    report["trl_over_a5_seconds_per_step"] = report["trl"]["seconds_per_step"] / report["a5"]["seconds_per_step"]
    start = validate(args.model, args.validation, args.samples)  # the policy both sides start from
    for side in ("a5", "trl"):
        diff = paired_difference(report[side]["per_question"], start["per_question"])
        report[side]["change_from_start"] = dict(zip(("difference", "lo", "hi"), diff))
    report["start"] = {k: v for k, v in start.items() if k != "per_question"}
    diff = paired_difference(report["a5"].pop("per_question"), report["trl"].pop("per_question"))
    report["a5_minus_trl_accuracy"] = dict(zip(("difference", "lo", "hi"), diff))
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"TRL / a5 seconds per step: {report['trl_over_a5_seconds_per_step']:.2f}")


if __name__ == "__main__":
    main()
