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


MIN_SHARED_PREFIX = 8


def shared_prefix_length(input_ids: Tensor) -> int:
    """Length of the token prefix common to every row, capped so each row keeps at least one token."""
    same = (input_ids == input_ids[:1]).all(dim=0)  # (T,)
    return min(int(same.long().cumprod(0).sum()), input_ids.shape[1] - 1)


def _forward_logits(model, input_ids: Tensor, share_prefix: bool) -> list[tuple[Tensor, slice]]:
    """Logits as (tensor, column slice) pieces. With a shared prefix of P tokens (the prompt template), the
    prefix runs once at batch 1 and its KV cache is repeated over the batch, so the B-1 duplicate prefix
    computations are skipped. This is exact: causal attention makes the prefix's states independent of
    what follows, and autograd sums the repeated cache's gradients back into the single prefix pass.
    Right padding needs no attention mask for the same reason (pads only come after real tokens)."""
    b, t = input_ids.shape
    p = shared_prefix_length(input_ids) if share_prefix and b > 1 else 0
    if p < MIN_SHARED_PREFIX:
        return [(model(input_ids=input_ids).logits, slice(0, t))]  # (B, T, V)
    pre = model(input_ids=input_ids[:1, :p], use_cache=True)
    cache = pre.past_key_values
    cache.batch_repeat_interleave(b)
    suffix = model(input_ids=input_ids[:, p:], past_key_values=cache, use_cache=False).logits  # (B, T-P, V)
    return [(pre.logits.expand(b, -1, -1), slice(0, p)), (suffix, slice(p, t))]  # (B, P, V), (B, T-P, V)


def get_response_log_probs(
    model,
    input_ids: Tensor,
    labels: Tensor,
    return_token_entropy: bool = False,
    share_prefix: bool = False,
    entropy_grad: bool = False,
) -> dict[str, Tensor]:
    """Forward `model` and return unmasked per-token label log-probs (and, if asked, token entropies).

    Entropy is a logged diagnostic, so it is computed without gradient to avoid holding a second
    (B, T, V) graph; `entropy_grad=True` (GRPO's entropy bonus) keeps that graph, from the same forward pass.
    `share_prefix=True` computes a prompt prefix common to all rows once (see `_forward_logits`); the result is
    the same up to floating-point reassociation.
    """
    pieces = _forward_logits(model, input_ids, share_prefix)
    out = {"log_probs": torch.cat([label_log_probs(lg, labels[:, cols]) for lg, cols in pieces], dim=1)}  # (B, T)
    if return_token_entropy:
        with torch.enable_grad() if entropy_grad else torch.no_grad():
            out["token_entropy"] = torch.cat([compute_entropy(lg.float()) for lg, _ in pieces], dim=1)  # (B, T)
    return out
