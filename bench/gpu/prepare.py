"""What the GPU machine's parts (bench/gpu/run.py) build, measure and read; each a subcommand, run in its own process.

    python3 bench/gpu/prepare.py probe  --out FILE [--vllm]                 # the machine, in a few seconds
    python3 bench/gpu/prepare.py model  --out DIR [--size full|tiny]        # a random-weights Qwen2 folder
    python3 bench/gpu/prepare.py params --out FILE --backend hf|vllm [--steps 2] [--size full|tiny]
    python3 bench/gpu/prepare.py grpo-summary --run DIR --params FILE --model DIR --out FILE [--smi FILE]
    python3 bench/gpu/prepare.py numerics --model DIR --out FILE [--size full|tiny]

- probe: Python, torch, CUDA, the card and its free memory, nvidia-smi, the environment variables that change what
  runs (CUDA_VISIBLE_DEVICES, PYTORCH_CUDA_ALLOC_CONF, NCCL_*, ...), disk, cores, memory (it needs nothing but the
  machine's torch: the learner's call runs it before installing); `--vllm` adds which of the project's imports load,
  vLLM's version, `vllm.cumem_allocator` (sleep mode), the allocator setting sleep mode
  refuses (`expandable_segments`) and the engine environment a5 sets (a5core.generation.vllm.ENGINE_ENVIRONMENT).
- model: Qwen2.5-Math-1.5B's architecture (`full`: a5core.model.arch.KNOWN's, bf16, built on the GPU when there is
  one) or a Qwen2-shaped tiny one (`tiny`: bench/gpu_check.py's TINY_QWEN2, float32), random weights, with the
  tokenizer `a5core.model.loading.build_tiny_model` trains from the repository's synthetic math text (its ids fit
  any vocabulary; no hub). Time and memory depend on the shapes, not on the values; random weights never stop
  early, so every rollout runs to max_tokens (the worst case).
- params: the full profile as composed (tests/fixtures/profiles/full.yaml, kept equal to conf/ by
  tests/test_profiles.py; DVC's Hydra is not needed there) for `--steps` GRPO steps of the full profile's 256
  rollouts (32 questions x 8, up to 1,024 tokens) on one GPU: `hf` generates with the policy itself (the machine's
  own torch and transformers, no vLLM), `vllm` with the engine beside it (`one_gpu`); no evaluation before or
  during the run, the final validation on the 16 fixture questions. `tiny` (the CPU dry run) shrinks the sizes.
- grpo-summary: each GRPO step's time split (`perf/sync_s`, `perf/rollout_s` with `perf/grade_s` inside it,
  `perf/old_log_probs_s`, `perf/optimizer_s`) and peak CUDA memory (`perf/peak_rollout_gb`, `perf/peak_update_gb`)
  from the stage's files, next to the memory plan for this card (a5core.run.plan) and nvidia-smi's log.
- numerics: the bf16 policy's log-probs of its own sampled tokens against a float32 copy's (the gap the GRPO ratio
  and the engine's log-probs carry), on the hf backend's samples.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
COMPOSED_FULL = ROOT / "tests" / "fixtures" / "profiles" / "full.yaml"
QWEN = "hf:Qwen/Qwen2.5-Math-1.5B"
GIB = 1024**3
# GRPO steps of the full profile, alone on one GPU; `run` names the stage's grpo_runs entry
STEPS = {
    "grpo": {"eval_every": 0, "checkpoint_every": 0},
    "validation": {"max_tokens": 256},
    "logging": {"console_every": 1},
}
BACKENDS = {
    "hf": {"backend": "hf", "batch_size": 256},  # one batch of the step's 256 rollouts
    "vllm": {"backend": "vllm", "layout": "one_gpu", "gpu_memory_utilization": 0.3},
}
TINY = {
    "model": {"device": "auto", "dtype": "float32", "weight_update": "nearest", "logits_chunk": 16},
    "grpo": {"rollout_batch_size": 16, "group_size": 4, "train_batch_size": 16, "gradient_accumulation_steps": 2},
    "generation": {"batch_size": 16},
    "validation": {"max_tokens": 16},
}
ENVIRONMENT = (  # variables that change what torch, NCCL, vLLM or the stages do
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "PYTORCH_CUDA_ALLOC_CONF",
    "OMP_NUM_THREADS",
    "TORCHINDUCTOR_COMPILE_THREADS",
    "TORCHINDUCTOR_CACHE_DIR",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "TOKENIZERS_PARALLELISM",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
)
PACKAGES = ("torch", "transformers", "peft", "accelerate", "pyarrow", "math-verify", "torchao", "dvclive", "vllm")
IMPORTS = ("a5core.stage.training", "math_verify", "torchao.optim", "dvclive", "torch.utils.tensorboard")


def merge(base: dict, edits: dict) -> dict:
    out = dict(base)
    for section, values in edits.items():
        out[section] = {**base.get(section, {}), **values}
    return out


def _tried(fn) -> object:
    """fn(), or the error's one line."""
    try:
        return fn()
    except Exception as e:  # a probe records what fails and goes on
        return f"error: {type(e).__name__}: {str(e)[:300]}"


def _smi(query: str) -> str:
    cmd = ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()


def probe(out: Path, with_vllm: bool) -> dict:
    import importlib.metadata as md

    import torch

    info: dict = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cores": os.cpu_count(),
        "memory_gib": _tried(lambda: round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB, 1)),
        "disk_free_gib": {p: round(shutil.disk_usage(p).free / GIB, 1) for p in ("/tmp", str(ROOT))},
        "environment": {k: os.environ[k] for k in ENVIRONMENT if k in os.environ}
        | {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "VLLM_"))},
        "packages": {p: _tried(lambda p=p: md.version(p)) for p in PACKAGES},
        "cuda": torch.cuda.is_available(),
        "torch_cuda": torch.version.cuda,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info(0)
        info |= {
            "device": props.name,
            "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
            "multiprocessors": props.multi_processor_count,
            "card_gib": round(total / GIB, 2),
            "free_gib": round(free / GIB, 2),
            "bf16": torch.cuda.is_bf16_supported(),
            "nccl": _tried(lambda: ".".join(map(str, torch.cuda.nccl.version()))),
        }
    if shutil.which("nvidia-smi"):
        info["nvidia_smi"] = _tried(lambda: _smi("name,memory.total,memory.used,driver_version"))
    if with_vllm:  # after the bundle's install: the project's imports, and vLLM's first-minute facts
        info["imports"] = {m: _tried(lambda m=m: __import__(m) and "ok") for m in IMPORTS}
        info["vllm"] = vllm_probe()
    out.write_text(json.dumps(info, indent=1) + "\n")
    return info


def vllm_probe() -> dict:
    """vLLM's first-minute facts: its version, the sleep-mode allocator's extension, the allocator setting sleep mode
    refuses, FlashInfer (the bundle carries none) and what a5's backend sets before the engine is built."""
    from a5core.generation.vllm import ENGINE_ENVIRONMENT

    alloc = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    return {
        "version": _tried(lambda: __import__("vllm").__version__),
        "cumem_allocator": _tried(lambda: __import__("vllm.cumem_allocator") and "ok"),
        "flashinfer": _tried(lambda: __import__("flashinfer") and "ok"),
        "engine_environment": ENGINE_ENVIRONMENT,
        "alloc_conf_blocks_sleep_mode": "expandable_segments:True" in alloc.replace(" ", ""),
    }


def model(out: Path, size: str) -> dict:
    import torch

    from a5core.model.arch import KNOWN
    from a5core.model.loading import build_tiny_model
    from bench.gpu_check import build_model, dry_run_arch

    tokenizer = build_tiny_model()[1]
    arch = dict(KNOWN[QWEN]) if size == "full" else dry_run_arch(tokenizer)
    dtype = torch.bfloat16 if size == "full" else torch.float32
    device = torch.device("cuda" if size == "full" and torch.cuda.is_available() else "cpu")
    net = build_model(arch, device).to(dtype)  # gpu_check's Qwen2 (seed 0, bf16), float32 when tiny
    net.save_pretrained(out)
    tokenizer.save_pretrained(out)
    params = sum(p.numel() for p in net.parameters())
    return {"model": str(out), "size": size, "parameters": params, "dtype": str(dtype), "vocab": arch["vocab_size"]}


def params(out: Path, size: str, backend: str, steps: int) -> dict:
    composed = merge(yaml.safe_load(COMPOSED_FULL.read_text()), STEPS)
    composed = merge(composed, {"grpo": {"n_grpo_steps": steps}, "generation": BACKENDS[backend]})
    if size == "tiny":
        composed = merge(composed, TINY)
    composed["grpo_runs"] = {"step": {}}
    out.write_text(yaml.safe_dump(composed, sort_keys=False))
    g = composed["grpo"]
    return {"params": str(out), "backend": backend, "steps": steps, "rollouts": g["rollout_batch_size"]}


def smi_peak_gib(path: Path | None) -> float | None:
    """The largest `memory.used` (MiB) in an nvidia-smi CSV log (timestamp, memory.used, ...), in GiB."""
    if path is None or not path.exists():
        return None
    used = []
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) > 1 and cells[1].replace(".", "", 1).isdigit():
            used.append(float(cells[1]))
    return round(max(used) / 1024, 2) if used else None


def card_gib() -> float:
    import torch

    from bench.gpu_check import DRY_RUN_CARD_GB

    return torch.cuda.get_device_properties(0).total_memory / GIB if torch.cuda.is_available() else DRY_RUN_CARD_GB


def grpo_summary(run: Path, params_path: Path, model_dir: Path, out: Path, smi: Path | None) -> dict:
    from a5core.run import plan
    from a5core.run.history import read_rows

    rows = read_rows(run / "logs", "train", run / "record")
    keys = ("sync_s", "rollout_s", "grade_s", "old_log_probs_s", "optimizer_s", "peak_rollout_gb", "peak_update_gb")
    steps = [
        {"grpo_step": r["count/grpo_step"], **{k: round(float(r[f"perf/{k}"]), 2) for k in keys if f"perf/{k}" in r}}
        for r in rows
    ]
    if not steps:
        sys.exit(f"grpo-summary: {run / 'logs' / 'train.csv'} holds no optimizer step: the stage did not train")
    card = card_gib()
    devices, tokens = plan.device_plans(str(params_path), card, model_dir)
    planned = {d.name: round(d.total, 2) for d in devices}
    measured = {k: max((s[k] for s in steps if k in s), default=None) for k in ("peak_rollout_gb", "peak_update_gb")}
    measured["nvidia_smi_peak_used_gib"] = smi_peak_gib(smi)
    metrics = run / "metrics.json"
    summary = {
        "card_gib": round(card, 2),
        "optimizer_steps": len(steps),
        "steps": steps,
        "plan_gb": planned,
        "plan_micro_batch_tokens": tokens,
        "measured": measured,
        "metrics": json.loads(metrics.read_text()) if metrics.exists() else None,
    }
    out.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def numerics(model_dir: Path, out: Path, size: str) -> dict:
    """The bf16 policy's per-token log-probs of its own samples against a float32 copy's, on the response tokens."""
    import torch

    from a5core.config.sections import SamplingConfig
    from a5core.generation.hf import HFBackend
    from a5core.model.loading import load_policy
    from a5core.model.logprobs import get_response_log_probs
    from a5core.model.tokenization import tokenize_ids
    from bench.vllm_check import questions

    device = "cuda" if torch.cuda.is_available() else "cpu"
    policy, tokenizer = load_policy(model_dir, device, "bfloat16")
    prompts, n, tokens = (questions(8), 4, 256) if size == "full" else (questions(2), 2, 16)
    sampling = SamplingConfig(temperature=1.0, max_tokens=tokens, n=n, seed=0, stop=())
    made = HFBackend(policy, tokenizer, batch_size=len(prompts) * n).generate(prompts, sampling, progress=False)
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    outs = [list(c.token_ids) for cs in made for c in cs]
    b = tokenize_ids([ids[i // n] for i in range(len(outs))], outs, tokenizer.pad_token_id or 0)
    b = {k: v.to(device) for k, v in b.items()}
    mask = b["response_mask"]  # (B, T)
    copy32 = copy.deepcopy(policy).float()
    with torch.no_grad():
        lp16 = get_response_log_probs(policy, b["input_ids"], b["labels"])["log_probs"].float()  # (B, T)
        lp32 = get_response_log_probs(copy32, b["input_ids"], b["labels"])["log_probs"]  # (B, T)
    gap = (lp16 - lp32)[mask]  # (tokens,)
    sampled = torch.tensor([x for cs in made for c in cs for x in c.token_logprobs], device=device)  # (tokens,)
    result = {
        "device": device,
        "samples": len(outs),
        "response_tokens": int(mask.sum()),
        "logprob_gap_max_abs": float(gap.abs().max()),
        "logprob_gap_mean_abs": float(gap.abs().mean()),
        "logprob_gap_mean": float(gap.mean()),
        "ratio_bf16_over_fp32_min": float(gap.exp().min()),
        "ratio_bf16_over_fp32_max": float(gap.exp().max()),
        "sequence_gap_max_abs": float(((lp16 - lp32) * mask).sum(-1).abs().max()),
        "sampler_vs_fp32_max_abs": float((sampled - lp32[mask]).abs().max()),
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["probe", "model", "params", "grpo-summary", "numerics"])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--size", choices=["full", "tiny"], default="full")
    p.add_argument("--backend", choices=list(BACKENDS), default="hf")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--vllm", action="store_true", help="probe: vLLM's first-minute facts too")
    p.add_argument("--run", type=Path, help="grpo-summary: the stage's folder (logs/, record/, metrics.json)")
    p.add_argument("--params", type=Path)
    p.add_argument("--model", type=Path)
    p.add_argument("--smi", type=Path, help="grpo-summary: nvidia-smi's CSV log of the run")
    args = p.parse_args(argv)
    if args.what == "probe":
        done = probe(args.out, args.vllm)
    elif args.what == "model":
        done = model(args.out, args.size)
    elif args.what == "params":
        done = params(args.out, args.size, args.backend, args.steps)
    elif args.what == "grpo-summary":
        done = grpo_summary(args.run, args.params, args.model, args.out, args.smi)
    else:
        done = numerics(args.model, args.out, args.size)
    print(json.dumps(done, default=str)[:4000])


if __name__ == "__main__":
    main()
