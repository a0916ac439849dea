"""generation: the rollout engines behind one interface, `make_backend(cfg, model_dir, policy, tokenizer)`.
May import base/, grader/, config/, data/, model/.
"""

from __future__ import annotations

from a5core.config.sections import GenerationConfig
from a5core.generation.base import Backend, Completion, truncate_at_stop
from a5core.generation.hf import HFBackend
from a5core.model.microbatch import Cut


def make_backend(
    cfg: GenerationConfig, model_dir: str, policy, tokenizer, *, seed: int, bf16: bool, cut: Cut
) -> Backend:
    """hf: generate with the policy object itself (float32 parameters: from a bf16 copy when `bf16`, the stage's
    resolved generation.dtype); vllm: an engine loaded from `model_dir` (its weight-sync probe computes the policy's
    log-probs with the stage's `cut`)."""
    if cfg.backend == "hf":
        return HFBackend(policy, tokenizer, batch_size=cfg.batch_size, bf16=bf16)
    from a5core.generation.vllm import VLLMBackend

    return VLLMBackend(model_dir, cfg, seed=seed, tokenizer=tokenizer, policy=policy, cut=cut)


__all__ = ["Backend", "Completion", "HFBackend", "make_backend", "truncate_at_stop"]
