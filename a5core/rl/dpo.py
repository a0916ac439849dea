"""Direct Preference Optimization, per instance (Rafailov et al., 2023), as in the CS336 A5 handout."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from a5core.model.logprobs import get_response_log_probs
from a5core.model.tokenization import tokenize_prompt_and_output

ALPACA_TEMPLATE = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the request."
    "\n\n### Instruction:\n{instruction}\n\n### Response:\n"
)


def sequence_log_prob(model, tokenizer, prompt: str, responses: list[str]) -> Tensor:
    """Summed log-prob of each whole response (EOS appended) given the Alpaca-formatted prompt: (N,)."""
    eos = tokenizer.eos_token or ""
    batch = tokenize_prompt_and_output(
        [ALPACA_TEMPLATE.format(instruction=prompt)] * len(responses), [r + eos for r in responses], tokenizer
    )
    device = next(model.parameters()).device
    lp = get_response_log_probs(model, batch["input_ids"].to(device), batch["labels"].to(device))["log_probs"]  # (N, T)
    return (lp * batch["response_mask"].to(device)).sum(dim=-1)  # (N,)


def compute_per_instance_dpo_loss(
    lm, lm_ref, tokenizer, beta: float, prompt: str, response_chosen: str, response_rejected: str
) -> Tensor:
    """-log sigmoid(beta * [(pi_c - ref_c) - (pi_r - ref_r)]) computed as softplus(-margin) (stable at |margin| 1e4).

    Uses the whole response's summed log-probability (not the last token); the reference is frozen.
    """
    pi = sequence_log_prob(lm, tokenizer, prompt, [response_chosen, response_rejected])  # (2,)
    with torch.no_grad():
        ref = sequence_log_prob(lm_ref, tokenizer, prompt, [response_chosen, response_rejected]).to(pi.device)  # (2,)
    return dpo_loss_from_log_probs(pi[0], pi[1], ref[0], ref[1], beta)


def dpo_loss_from_log_probs(
    pi_chosen: Tensor, pi_rejected: Tensor, ref_chosen: Tensor, ref_rejected: Tensor, beta: float
) -> Tensor:
    """The DPO loss from summed log-probs: softplus(-beta * margin), finite for any finite margin."""
    margin = (pi_chosen - ref_chosen) - (pi_rejected - ref_rejected)  # ()
    return F.softplus(-beta * margin)  # ()
