"""How a training step's work is cut and computed: settings of `model` that change memory and speed, never the loss.

- `micro_batch_tokens`: the compute micro-batches of an optimizer step. `auto`: on CUDA, the largest budget whose
  memory plan fits 90% of the card (a5core/run/plan.py; the stage resolves it, a5core/stage/training.py); on the CPU the
  handout's split (GRPO: train_batch_size / gradient_accumulation_steps rollouts in the step's order; SFT:
  micro_batch_size examples sorted by length), which the DAG's numbers rest on. A number packs the step's sequences,
  longest first, into micro-batches of at most that many padded tokens (rows x longest row; verl's dynamic batch
  size). Either way every micro-batch's loss is scaled by its share of the optimizer step (`share`), so the gradient
  is the step's mean whatever the split (tests/test_microbatch.py).
- `logits_chunk`: compute the LM head, log-softmax, label log-prob and entropy this many positions at a time, each
  chunk recomputed in backward (a5core/model/logprobs.py), so no (tokens x vocabulary) float32 tensor outlives its
  chunk.
- `pack_sequences`: each micro-batch runs as one row, its sequences back to back with position ids restarting at
  0, which transformers attends block-causally: no padded positions at all (a5core/model/logprobs.py).
- `group_prompts`: a token budget's padded micro-batches each hold the samples of one prompt (GRPO's G samples of a
  question, EI's kept samples), so the shared-prefix pass (a5core/model/logprobs.py) computes the whole prompt once
  rather than only the template that every prompt starts with; it trades some padding for it (reports/step_cut.md).
- `gradient_checkpointing`: transformers' activation checkpointing (non-reentrant): each decoder layer's activations
  are recomputed in backward instead of kept; one more forward's compute for most of the activation memory.
The stage resolves them once (`Cut.of`, a5core/stage/training.py) into its `Compute` record
(a5core/model/compute.py), which the loops pass on to `micro_batches` and the log-probs. Library use gets the handout's
path (`Cut()`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from a5core.config.sections import ModelConfig

# Models whose logits are exactly lm_head(last hidden state) in transformers (no soft-capping or scaling after the
# head), so the chunked path may compute them itself; others fall back to the model's own forward.
CHUNKABLE = ("llama", "qwen2", "qwen3", "mistral")


class BudgetError(ValueError):
    """A sequence does not fit the token budget of a micro-batch."""


@dataclass(frozen=True)
class Cut:
    """How a stage cuts and computes its steps (see the module docstring), resolved once (`of`); the default is the
    handout's path. It travels in the stage's `a5core.model.compute.Compute` record."""

    micro_batch_tokens: int | None = None  # padded tokens per micro-batch; None: the handout's split by count
    logits_chunk: int = 0  # positions per chunk of the LM head and log-softmax; 0: all at once
    gradient_checkpointing: bool = False  # recompute decoder layers in backward
    pack_sequences: bool = (
        False  # one packed row per micro-batch (a budget then counts real tokens, not rows x longest)
    )
    group_prompts: bool = False  # a budget's padded micro-batches each hold one prompt's samples (whole prompt shared)

    @classmethod
    def of(cls, model: ModelConfig, planned_tokens: int | None = None) -> Cut:
        """The `model` section's settings; `micro_batch_tokens` auto is `planned_tokens` (the memory plan's number, on
        CUDA) or else the handout's split."""
        tokens = model.micro_batch_tokens if model.micro_batch_tokens != "auto" else planned_tokens
        return cls(tokens, model.logits_chunk, model.gradient_checkpointing, model.pack_sequences, model.group_prompts)


def prepare(model, cut: Cut) -> None:
    """Apply the settings that live on the model: gradient checkpointing (transformers' own switch)."""
    if cut.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif getattr(model, "is_gradient_checkpointing", False):
        model.gradient_checkpointing_disable()


def split(
    lengths: Sequence[int],
    count: int,
    budget: int | None = None,
    packed: bool = False,
    prompts: Sequence[int] | None = None,
) -> list[list[int]]:
    """Positions 0..n-1 of a step's sequences (of `lengths` tokens) grouped into compute micro-batches.

    `budget` None: consecutive groups of `count` in the given order (the handout's split). Otherwise longest first,
    each group as many sequences as keep its cost <= `budget`: rows x its longest row, or (`packed`) the sum of its
    lengths; a sequence longer than the budget is an error (never truncated). `prompts` (one id per sequence; padded
    budgets only): a group never mixes prompts, and the prompts come longest first, each its samples longest first."""
    n = len(lengths)
    if budget is None:
        return [list(range(s, min(s + count, n))) for s in range(0, n, count)]
    order = sorted(range(n), key=lambda i: (-lengths[i], i))
    if order and lengths[order[0]] > budget:
        raise BudgetError(
            f"a sequence of {lengths[order[0]]} tokens does not fit model.micro_batch_tokens={budget}: raise it "
            "to at least the longest prompt + max_tokens, or set it to auto"
        )
    key = list(prompts) if prompts is not None and not packed else [0] * n
    first = {}  # each prompt's place: where its longest sample comes in `order`
    for rank, i in enumerate(order):
        first.setdefault(key[i], rank)
    order.sort(key=lambda i: first[key[i]])  # stable: each prompt's samples stay longest first
    groups: list[list[int]] = []
    for i in order:
        fits = groups and cost([lengths[j] for j in groups[-1]] + [lengths[i]], packed) <= budget
        if fits and key[groups[-1][0]] == key[i]:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def cost(lengths: Sequence[int], packed: bool) -> int:
    """Positions a micro-batch of sequences of `lengths` computes: their sum packed, else rows x the longest."""
    return sum(lengths) if packed else len(lengths) * max(lengths)


def micro_batches(
    lengths: Sequence[int], count: int, cut: Cut, prompts: Sequence[Sequence[int]] = ()
) -> list[list[int]]:
    """`split` with the stage's settings `cut`; `prompts`: each sequence's prompt token ids (for group_prompts)."""
    c = cut
    ids = None
    if c.group_prompts and prompts:
        seen: dict[tuple, int] = {}
        ids = [seen.setdefault(tuple(p), len(seen)) for p in prompts]
    return split(lengths, count, c.micro_batch_tokens, c.pack_sequences, ids)


def share(step_units: float, micro_units: float) -> float:
    """The divisor that turns a micro-batch's mean loss over its `micro_units` (sequences or tokens) into its part of
    the optimizer step's mean over `step_units`: the handout's `gradient_accumulation_steps` when the split is even."""
    return step_units / micro_units


def divisor(step_units: float, micro_units: float, weight: float) -> float:
    """What a micro-batch's mean loss is divided by (the handout's `gradient_accumulation_steps` argument): its `share`
    over this rank's `weight` for it; infinite for a weight of 0, a fsdp2 rank's repeat whose loss counts nothing and
    whose backward only keeps the collectives in step."""
    return share(step_units, micro_units) / weight if weight else math.inf
