"""Per-token log-probabilities and entropies of a causal LM (pure tensor math plus one forward pass).

- `get_response_log_probs`: the handout's function; label log-probs (and entropies) of every position.
- Shared prompt prefix (`share_prefix`): computed once and its KV cache repeated over the batch (exact).
- Packed rows (`lengths`, model.pack_sequences): a micro-batch's sequences as one row with restarting position ids,
  which transformers attends block-causally (SDPA/eager: a block mask; flash-attention 2: varlen); no padding.
- Chunked LM head (`cut.logits_chunk`, the stage's model.logits_chunk): the decoder's last hidden states
  go through the LM head, log-softmax, label pick and entropy a chunk of positions at a time, each chunk under
  activation checkpointing, so backward recomputes one chunk's logits instead of keeping all of them: the
  (tokens x vocabulary) float32 tensor never exists. Same values and gradients (tests/test_microbatch.py).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from a5core.model import distributed, microbatch


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


def _forward(model, input_ids: Tensor, share_prefix: bool, key: str, positions=None) -> list[tuple[Tensor, slice]]:
    """`model`'s output `key` (logits, or the decoder's last_hidden_state) as (tensor, column slice) pieces. With a
    shared prefix of P tokens (the prompt template), the prefix runs once at batch 1 and its KV cache is repeated over
    the batch, so the B-1 duplicate prefix computations are skipped. This is exact: causal attention makes the
    prefix's states independent of what follows, and autograd sums the repeated cache's gradients back into the
    single prefix pass. Right padding needs no attention mask for the same reason (pads only come after real
    tokens). `positions` (1, S): a packed row (`_pack`), run without a cache so that transformers masks it
    block-causally."""
    b, t = input_ids.shape
    if positions is not None:
        return [(getattr(model(input_ids=input_ids, position_ids=positions, use_cache=False), key), slice(0, t))]
    # under fsdp2 every forward is a collective: a shared prefix would make the number of forwards depend on the data
    share_prefix = share_prefix and not distributed.is_sharded(model)
    p = shared_prefix_length(input_ids) if share_prefix and b > 1 else 0
    if p < MIN_SHARED_PREFIX:
        return [(getattr(model(input_ids=input_ids), key), slice(0, t))]  # (B, T, V or H)
    pre = model(input_ids=input_ids[:1, :p], use_cache=True)
    cache = pre.past_key_values
    cache.batch_repeat_interleave(b)
    suffix = getattr(model(input_ids=input_ids[:, p:], past_key_values=cache, use_cache=False), key)  # (B, T-P, *)
    return [(getattr(pre, key).expand(b, -1, -1), slice(0, p)), (suffix, slice(p, t))]  # (B, P, *), (B, T-P, *)


def _head_stats(hidden: Tensor, weight: Tensor, labels: Tensor, entropy: bool, entropy_grad: bool):
    """Label log-probs and entropies of one chunk of positions from its hidden states (the LM head inside)."""
    logits = torch.nn.functional.linear(hidden, weight)  # (B, C, V)
    lp = label_log_probs(logits, labels)  # (B, C)
    if not entropy:
        return lp, None
    # computed after the log-probs: in backward, non-reentrant checkpointing stops recomputing once it has what the
    # gradient needs, so a no-grad entropy costs nothing there
    with torch.enable_grad() if entropy_grad else torch.no_grad():
        return lp, compute_entropy(logits.float())  # (B, C), (B, C)


def chunkable(model) -> bool:
    """Whether `model`'s logits are exactly its LM head applied to its decoder's output (microbatch.CHUNKABLE)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return (
        getattr(getattr(model, "config", None), "model_type", None) in microbatch.CHUNKABLE
        and isinstance(head, torch.nn.Linear)
        and head.bias is None
    )


def _pack(input_ids: Tensor, labels: Tensor, lengths: list[int]) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded rows (B, T) with `lengths` real positions as one row (1, S) and its positions, restarting at 0 at
    each sequence: transformers' packed-sequence format (block-causal attention from the position ids)."""
    ids = torch.cat([input_ids[i, :n] for i, n in enumerate(lengths)])[None]  # (1, S)
    lab = torch.cat([labels[i, :n] for i, n in enumerate(lengths)])[None]  # (1, S)
    pos = torch.cat([torch.arange(n, device=input_ids.device) for n in lengths])[None]  # (1, S)
    return ids, lab, pos


def _unpack(packed: Tensor, lengths: list[int], width: int) -> Tensor:
    """(1, S) back to right-padded rows (B, T), zeros at the padding."""
    return torch.stack([torch.nn.functional.pad(r, (0, width - r.shape[0])) for r in packed[0].split(lengths)])


def _chunked(model, input_ids, labels, share_prefix, chunk, entropy, entropy_grad, positions) -> dict[str, Tensor]:
    """get_response_log_probs through the decoder and the LM head in chunks of `chunk` positions."""
    weight = model.get_output_embeddings().weight  # (V, H)
    lps, ents = [], []
    decoder = model.get_decoder()
    for hidden, cols in _forward(decoder, input_ids, share_prefix, "last_hidden_state", positions):  # (B, P, H)
        for s in range(0, hidden.shape[1], chunk):
            h, lab = hidden[:, s : s + chunk], labels[:, cols][:, s : s + chunk]  # (B, C, H), (B, C)
            if torch.is_grad_enabled() and h.requires_grad:  # keep only h; the chunk's logits are rebuilt in backward
                lp, ent = checkpoint(_head_stats, h, weight, lab, entropy, entropy_grad, use_reentrant=False)
            else:
                lp, ent = _head_stats(h, weight, lab, entropy, entropy_grad)
            lps.append(lp)
            ents.append(ent)
    out = {"log_probs": torch.cat(lps, dim=1)}  # (B, T)
    if entropy:
        out["token_entropy"] = torch.cat(ents, dim=1) if entropy_grad else torch.cat(ents, dim=1).detach()  # (B, T)
    return out


def get_response_log_probs(
    model,
    input_ids: Tensor,
    labels: Tensor,
    return_token_entropy: bool = False,
    share_prefix: bool = False,
    entropy_grad: bool = False,
    lengths: list[int] | None = None,
    cut: microbatch.Cut = microbatch.Cut(),
) -> dict[str, Tensor]:
    """Forward `model` and return unmasked per-token label log-probs (and, if asked, token entropies).

    Entropy is a logged diagnostic, so it is computed without gradient to avoid holding a second
    (B, T, V) graph; `entropy_grad=True` (GRPO's entropy bonus) keeps that graph, from the same forward pass.
    `share_prefix=True` computes a prompt prefix common to all rows once (see `_forward`); the result is
    the same up to floating-point reassociation. `cut`: the stage's compute settings (a5core/model/microbatch.py;
    default: the handout's path): `logits_chunk` positions at a time through the LM head (0 or a model outside
    microbatch.CHUNKABLE: all at once); with `pack_sequences` and `lengths` (each row's real positions) the rows run
    packed into one, padding-free (values at the padding are then 0).
    """
    if lengths is not None and cut.pack_sequences:
        ids, lab, pos = _pack(input_ids, labels, lengths)
        out = _log_probs(model, ids, lab, return_token_entropy, False, entropy_grad, cut.logits_chunk, pos)
        return {k: _unpack(v, lengths, input_ids.shape[1]) for k, v in out.items()}  # (B, T) each
    return _log_probs(model, input_ids, labels, return_token_entropy, share_prefix, entropy_grad, cut.logits_chunk)


def _log_probs(model, input_ids, labels, entropy, share_prefix, entropy_grad, chunk, positions=None):
    """get_response_log_probs on rows as given (padded, or one packed row with its `positions`), the LM head `chunk`
    positions at a time (0: all at once)."""
    if getattr(model, "is_gradient_checkpointing", False) and model.training:
        share_prefix = False  # transformers turns the KV cache off under gradient checkpointing: no prefix to share
    if chunk and chunkable(model):  # not model(...): under fsdp2 it runs inside the root unit's hooks
        args = (input_ids, labels, share_prefix, chunk, entropy, entropy_grad, positions)
        return distributed.as_forward(model, _chunked, *args)
    pieces = _forward(model, input_ids, share_prefix, "logits", positions)
    out = {"log_probs": torch.cat([label_log_probs(lg, labels[:, cols]) for lg, cols in pieces], dim=1)}  # (B, T)
    if entropy:
        with torch.enable_grad() if entropy_grad else torch.no_grad():
            out["token_entropy"] = torch.cat([compute_entropy(lg.float()) for lg, _ in pieces], dim=1)  # (B, T)
    return out
