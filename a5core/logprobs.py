"""Per-token log-probabilities and entropies of a causal LM (pure tensor math plus one forward pass)."""
from __future__ import annotations

import torch
from torch import Tensor


def compute_entropy(logits: Tensor) -> Tensor:
    """Entropy of softmax(logits) over the last dim: H = logsumexp(z) - sum(softmax(z) * z).

    Uses logsumexp, so logits of magnitude 1e4 neither overflow nor produce NaN.
    """
    lse = torch.logsumexp(logits, dim=-1)  # (B, T)
    probs = torch.softmax(logits, dim=-1)  # (B, T, V)
    return lse - (probs * logits).sum(dim=-1)  # (B, T)


def label_log_probs(logits: Tensor, labels: Tensor) -> Tensor:
    """log p(label) = z[label] - logsumexp(z), without materialising a (B, T, V) log_softmax.

    Autograd saves only the logits (already alive) and the (B, T) logsumexp, so no extra full-vocabulary
    float32 tensor is kept for backward. bf16 logits are upcast (accuracy of the normaliser matters).
    """
    if logits.dtype != torch.float32:
        logits = logits.float()
    picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return picked - torch.logsumexp(logits, dim=-1)  # (B, T)


def get_response_log_probs(model, input_ids: Tensor, labels: Tensor, return_token_entropy: bool = False) -> dict[str, Tensor]:
    """Forward `model` and return unmasked per-token label log-probs (and, if asked, token entropies).

    Entropy is a logged diagnostic, so it is computed without gradient to avoid holding a second
    (B, T, V) graph.
    """
    logits = model(input_ids=input_ids).logits  # (B, T, V)
    out = {"log_probs": label_log_probs(logits, labels)}  # (B, T)
    if return_token_entropy:
        with torch.no_grad():
            out["token_entropy"] = compute_entropy(logits.float())  # (B, T)
    return out
