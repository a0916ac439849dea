"""LoRA (Hu et al., 2021) through PEFT for SFT, EI and GRPO: `model.lora_rank` > 0 trains low-rank adapters on
`model.lora_targets` and freezes the rest.

- `attach`: wraps the loaded policy in PEFT's LoRA model (B = 0, so the run starts exactly at the loaded weights;
  dropout 0, so training stays deterministic and resumes bit-identically).
- `merged_state_dict`: the policy's weights under the base model's names with each adapter merged out of place
  (W + alpha / r * B A): what the vLLM engine loads at every weight sync (vLLM's own LoRA support would need a
  separate adapter path and its LoRA kernels; merged weights keep one code path and the exact weight check).
- `for_saving`: a merged plain model, so every model folder loads with `from_pretrained` and the next stage (an EI
  round, GRPO) starts from it with fresh adapters. The optimizer sees only the adapters (a5core/model/optim.py), so
  gradients and AdamW state cost r (in + out) per adapted layer instead of the layer's weights (a5core/run/plan.py).
"""

from __future__ import annotations

import copy

import torch

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def attach(policy, rank: int, alpha: float, targets: tuple[str, ...]):
    """`policy` with LoRA adapters of `rank` on the `targets` linear layers, or `policy` itself when rank is 0."""
    if not rank:
        return policy
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0, task_type="CAUSAL_LM")
    wrapped = get_peft_model(policy, cfg)
    missing = [t for t in targets if not any(n.endswith(f".{t}") for n, _ in policy.named_modules())]
    if missing:
        raise ValueError(f"model.lora_targets {missing} name no layer of this model")
    return wrapped


def is_lora(policy) -> bool:
    return hasattr(policy, "peft_config")


def merged_state_dict(policy) -> dict[str, torch.Tensor]:
    """The policy's tensors by the base model's names, adapters merged (W + delta, out of place: training is
    untouched); a plain model's own state_dict."""
    if not is_lora(policy):
        return policy.state_dict()
    from peft.tuners.lora import LoraLayer

    base = policy.get_base_model()
    out = {n.replace(".base_layer.", "."): t for n, t in base.state_dict().items() if ".lora_" not in n}
    with torch.no_grad():
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer):
                merged = module.get_base_layer().weight.clone()  # (out, in)
                merged += module.get_delta_weight("default")  # in place, as PEFT's merge: the saved model's bits
                out[f"{name}.weight"] = merged
    return out


def for_saving(policy):
    """A plain transformers model with the adapters merged (a copy: the policy keeps training), or the policy."""
    if not is_lora(policy):
        return policy
    return copy.deepcopy(policy).merge_and_unload()
