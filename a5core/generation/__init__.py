"""generation: the rollout engines behind one interface, `make_backend(cfg, model_dir, policy, tokenizer)`.
May import base/, grader/, config/, data/, model/.
"""

from __future__ import annotations

from a5core.config.sections import GenerationConfig
from a5core.generation.base import Backend, Completion, truncate_at_stop
from a5core.generation.hf import HFBackend


def make_backend(
    cfg: GenerationConfig, model_dir: str, policy, tokenizer, seed: int = 0, bf16_autocast: bool = False
) -> Backend:
    """hf: generate with the policy object itself (under the stage's `bf16_autocast` for float32 weights, unless
    generation.dtype says otherwise); vllm: an engine loaded from `model_dir`."""
    if cfg.backend == "hf":
        return HFBackend(policy, tokenizer, batch_size=cfg.batch_size, dtype=cfg.dtype, bf16_autocast=bf16_autocast)
    from a5core.generation.vllm import VLLMBackend

    return VLLMBackend(model_dir, cfg, seed=seed, tokenizer=tokenizer, policy=policy)


__all__ = ["Backend", "Completion", "HFBackend", "make_backend", "truncate_at_stop"]
