"""What a stage resolves once about how its model computes, as one frozen record built at the stage's start and passed
through the loops (`train_sft`, `train_grpo`, `ei_round`), their optimizer steps and `get_response_log_probs`; no
module holds it.

- `cut`: how an optimizer step is cut into micro-batches and computed (a5core/model/microbatch.py).
- `autocast`: bf16 autocast for float32 weights and the hf backend's generation precision, as resolved on this
  machine (a5core/model/autocast.py).
- `weight_update`: how AdamW writes into bf16 weights (a5core/model/optim.py).
Every loop and step takes it as a required argument (tests/test_lint.py): a caller that forgot it would silently get
`Compute()`, the reference path (the handout's split, float32, torch's AdamW), which a test or bench passes by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from a5core.config.sections import GenerationConfig, ModelConfig
from a5core.model.autocast import Autocast, resolved
from a5core.model.microbatch import Cut
from a5core.model.optim import WeightUpdate


@dataclass(frozen=True)
class Compute:
    """A stage's compute settings (`of`); the default is the handout's path in float32."""

    cut: Cut = Cut()  # micro-batches, chunked LM head, packing, prompt grouping, checkpointing
    autocast: Autocast = Autocast()  # bf16 autocast for float32 weights, resolved for this machine
    weight_update: WeightUpdate = "nearest"  # AdamW's write into bf16 weights

    @property
    def bf16_autocast(self) -> bool:
        """Autocast as resolved for the policy's weights: the run's numerics record (provenance, fingerprint)."""
        return self.autocast.bf16_autocast

    @property
    def autocast_on(self) -> bool:
        """What `autocast_context` gets: the mode as for float32 parameters (a no-op for a model without any)."""
        return self.autocast.on_float32

    @property
    def generation_bf16(self) -> bool:
        """The hf backend generates from a bf16 copy of the float32 weights (generation.dtype, resolved here)."""
        return self.autocast.generation_bf16

    @classmethod
    def of(
        cls,
        model: ModelConfig,
        device: torch.device | str,
        planned_tokens: int | None = None,
        quiet: bool = False,
        generation: GenerationConfig | None = None,
    ) -> Compute:
        """The `model` section (and `generation`'s dtype, for the hf backend: a vLLM engine has its own) resolved on
        `device` (the autocast lines printed unless `quiet`); `planned_tokens`: the memory plan's micro-batch, what
        `micro_batch_tokens: auto` means on CUDA."""
        gen_dtype = generation.policy_dtype if generation is not None else "float32"
        return cls(
            Cut.of(model, planned_tokens),
            resolved(model.autocast, device, weights=model.dtype, generation=gen_dtype, quiet=quiet),
            model.weight_update,
        )


def reset_peak(device: torch.device) -> None:
    """Start a new `peak_gb` reading on `device` (nothing off CUDA)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gb(device: torch.device, key: str) -> dict[str, float]:
    """{key: GiB}, the CUDA allocator's peak allocation on `device` since `reset_peak` (a step's `perf/peak_*_gb`);
    {} off CUDA (the CPU has no such counter)."""
    return {key: torch.cuda.max_memory_allocated(device) / 1024**3} if device.type == "cuda" else {}
