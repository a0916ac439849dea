"""Generation with a transformers causal LM (the CPU default backend).

A hand-written sampling loop over the model's KV cache (rather than `model.generate`) so that the prompt
template shared by all prompts is computed once per call; prompts are sorted by length so each batch pads
little; stop strings end a sequence and are kept in the text. With `n > 1` each prompt is repeated n times inside the
batch. The backend generates with the policy object itself, so a weight "sync" is the identity (no copy can go stale),
unless it generates in bf16 from float32 weights (below) or is told to keep its own weights (`keep_own_weights`:
asynchronous rollouts, generated while the learner updates the policy): then a sync copies them. The entropy of each
sampling distribution is returned with the tokens, so callers need no second forward pass to log response entropy.

As on vLLM: `token_ids` are exactly the sampled ids (the token that completed a stop string and a sampled EOS
included; the text is cut right after the stop string), and every (prompt, sample) draws from its own random
stream seeded from (sampling.seed, prompt index, sample index), so noise is independent across prompts and
samples, and a prompt's completion does not depend on which other prompts share its batch.

bf16 generation for float32 weights (`generation.dtype` as the stage resolved it: a5core/model/autocast.py) runs on a
bf16 copy of the policy's parameters, cast at each sync (buffers such as rotary frequencies stay float32, as a bf16
checkpoint loads them; eager attention on a CPU: `own_copy`). On this project's AVX512-BF16 CPU it generated faster
than float32, where bf16 autocast, recasting every weight at every decode step, was slower (reports/roofline.md). The
copy costs 2 bytes per parameter (a5core/run/plan.py counts it); the sampled tokens' log-probs are the copy's
(`grpo.tis_cap`, off by default, can correct for the gap).
"""

from __future__ import annotations

import copy

import torch

from a5core.base.progress import bar as progress_bar
from a5core.config.sections import BACKEND_FACTS, SamplingConfig
from a5core.generation.base import Completion, request_seed, truncate_at_stop
from a5core.model.logprobs import compute_entropy


def sample_next(
    logits: torch.Tensor, temperature: float, top_p: float, uniforms: torch.Tensor | None = None
) -> torch.Tensor:
    """Greedy (temperature <= 0) or temperature + nucleus sampling of one token per row: (b, V) -> (b,).

    `uniforms` (b,): one U[0, 1) draw per row from that row's own stream (default: the global generator).
    """
    if temperature <= 0:
        return logits.argmax(dim=-1)  # (b,)
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # (b, V)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)  # (b, V)
        drop = sorted_p.cumsum(-1) - sorted_p > top_p  # (b, V): mass before this token already exceeds top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)  # (b, V)
    # Inverse-CDF sampling: one uniform per row. torch.multinomial draws an exponential per vocabulary entry
    # (70 ms for 48 x 49k on this CPU, ~10% of generation time); this takes ~4 ms. float64 keeps the cdf exact
    # enough that tail tokens keep their probability; zero-probability tokens are never returned (right=True).
    cdf = probs.double().cumsum(-1)  # (b, V)
    if uniforms is None:
        uniforms = torch.rand(cdf.shape[0])
    u = uniforms.to(cdf.device, cdf.dtype)[:, None] * cdf[:, -1:]  # (b, 1)
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=cdf.shape[-1] - 1)  # (b,)


def own_copy(policy, bf16: bool) -> torch.nn.Module:
    """A frozen copy of `policy` to generate from; with `bf16`, its float32 parameters made in bf16 directly (2 bytes
    each at the peak too; tied weights stay tied; buffers, e.g. rotary frequencies, as they are) and, on a CPU, eager
    attention: torch's bf16 SDPA kernel for the CPU took 3x float32's time in decoding (reports/roofline.md's
    profile), and the copy generated 1.25-1.35x faster with eager attention."""
    memo = {
        id(p): torch.nn.Parameter(p.detach().to(torch.bfloat16), requires_grad=False)
        for p in (policy.parameters() if bf16 else ())
        if p.dtype == torch.float32
    }  # deepcopy takes these for the parameters instead of copying them
    own = copy.deepcopy(policy, memo).requires_grad_(False)
    for param in own.parameters():
        param.grad = None
    if bf16 and next(own.parameters()).device.type == "cpu":
        own.set_attn_implementation("eager")
    return own


class HFBackend:
    """Batched sampling with a KV cache on a transformers causal LM (see the module docstring).

    The prompt prefix shared by every prompt of a call (the r1_zero template) is run once and its KV cache
    repeated over each batch; the per-prompt suffixes follow, left-padded *after* the prefix with explicit
    position ids, so every row sees exactly its own prompt. `min_tokens` blocks eos and stop strings.
    """

    STOP_TAIL_TOKENS = 16  # stop strings are searched in the decoded tail of this many tokens
    takes_shards = BACKEND_FACTS["hf"].takes_shards  # fsdp2: generates from a whole copy of the weights on each rank

    def __init__(self, model, tokenizer, batch_size: int = 32, bf16: bool = False):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.bf16 = bf16  # generate in bf16 (the stage's resolved generation.dtype): float32 weights get a bf16 copy
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.keeps_own = False  # `keep_own_weights` was called
        self.own: torch.nn.Module | None = None  # the weights' own copy (bf16 or kept), made at the first sync

    def keep_own_weights(self) -> None:
        """From the next sync on, generate from a copy of the policy's weights taken at the sync, so the learner may
        update the policy while this generates (grpo.max_staleness)."""
        self.keeps_own = True

    def sync_weights(self, policy) -> None:
        """Generate from `policy` from now on: the object itself, or its weights copied into this backend's own copy
        (cast to bf16 where the policy has float32 parameters and generation is bf16; kept: `keep_own_weights`)."""
        cast = self.bf16 and any(p.dtype == torch.float32 for p in policy.parameters())
        if not (self.keeps_own or cast):
            self.model = policy
            return
        if self.own is None:
            self.own = own_copy(policy, bf16=cast)
        with torch.no_grad():
            for (name, mine), (theirs_name, theirs) in zip(
                self.own.state_dict().items(), policy.state_dict().items(), strict=True
            ):
                if name != theirs_name:
                    raise RuntimeError(f"weight sync: the copy's {name} met the policy's {theirs_name}")
                mine.copy_(theirs)  # casts to the copy's dtype
        self.model = self.own

    def generate(self, prompts: list[str], sampling: SamplingConfig, progress: bool = True) -> list[list[Completion]]:
        if self.bf16 and self.own is None:  # never synced (the baseline stage): the bf16 copy of the policy now
            self.sync_weights(self.model)  # (a sharded policy is always synced first, through FullWeightsBackend)
        return self._generate(prompts, sampling, progress)

    @torch.inference_mode()
    def _generate(self, prompts: list[str], sampling: SamplingConfig, progress: bool) -> list[list[Completion]]:
        encoded = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        if any(not e for e in encoded):
            raise ValueError("an empty prompt cannot be generated from")
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()
        prefix = self._common_prefix(encoded)
        cache = (
            self.model(input_ids=torch.tensor([prefix], device=device), use_cache=True).past_key_values
            if prefix
            else None
        )
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
        per_batch = max(1, self.batch_size // max(1, sampling.n))
        results: list[list[Completion]] = [[] for _ in prompts]
        bar = progress_bar(len(prompts) * sampling.n, "generating", unit="seq", disable=not progress)
        for start in range(0, len(order), per_batch):
            idx = order[start : start + per_batch]
            suffixes = [encoded[i][len(prefix) :] for i in idx for _ in range(sampling.n)]
            index = {i: sampling.index_offset + i for i in idx}  # global prompt index (a rank's block: distributed)
            streams = [
                torch.Generator().manual_seed(request_seed(sampling.seed, index[i], j))
                for i in idx
                for j in range(sampling.n)
            ]
            outs = self._generate_batch(suffixes, cache, len(prefix), sampling, device, streams)
            for j, i in enumerate(idx):
                results[i] = outs[j * sampling.n : (j + 1) * sampling.n]
            bar.update(len(idx) * sampling.n)
        bar.close()
        self.model.train(was_training)
        return results

    @staticmethod
    def _common_prefix(encoded: list[list[int]]) -> list[int]:
        """Longest common token prefix, leaving every prompt at least one token of its own."""
        first, n = encoded[0], min(len(e) for e in encoded) - 1
        k = 0
        while k < n and all(e[k] == first[k] for e in encoded):
            k += 1
        return first[:k]

    def _batch_inputs(self, suffixes: list[list[int]], prefix_cache, p: int, device):
        """(ids, mask, positions, cache) of a batch: suffixes left-padded after the shared prefix, whose cache is
        repeated over the batch; positions skip the padding so every row sees exactly its own prompt."""
        b, width = len(suffixes), max(len(x) for x in suffixes)
        ids = torch.full((b, width), self.pad_id, dtype=torch.long)  # (b, S)
        mask = torch.zeros((b, p + width), dtype=torch.long)  # (b, P+S)
        mask[:, :p] = 1
        for r, x in enumerate(suffixes):
            ids[r, width - len(x) :] = torch.tensor(x)
            mask[r, p + width - len(x) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, p:]  # (b, S)
        cache = None
        if prefix_cache is not None:
            cache = copy.deepcopy(prefix_cache)
            cache.batch_repeat_interleave(b)
        return ids.to(device), mask.to(device), pos.to(device), cache

    def _generate_batch(
        self,
        suffixes: list[list[int]],
        prefix_cache,
        p: int,
        sampling: SamplingConfig,
        device,
        streams: list[torch.Generator],
    ) -> list[Completion]:
        ids, mask, pos, cache = self._batch_inputs(suffixes, prefix_cache, p, device)
        b, eos = len(suffixes), self.tokenizer.eos_token_id
        new: list[list[int]] = [[] for _ in range(b)]
        # the entropy of the distribution each new token came from, and the new token's log-prob under it (before
        # min_tokens masking and temperature, as training sees it)
        ents: list[list[float]] = [[] for _ in range(b)]
        lps: list[list[float]] = [[] for _ in range(b)]
        done = torch.zeros(b, dtype=torch.bool)
        alive = torch.arange(b)  # rows still generating, in cache order
        out = self._step(ids, mask, pos, cache)
        for t in range(sampling.max_tokens):
            logits = out.logits[:, -1, :].float()  # (a, V): one row per unfinished sequence
            ent, lse = compute_entropy(logits).tolist(), torch.logsumexp(logits, dim=-1)  # (a,) each
            if t < sampling.min_tokens and eos is not None:
                logits[:, eos] = float("-inf")
            nxt = torch.full((b,), self.pad_id, dtype=torch.long)  # (b,)
            uniforms = torch.cat([torch.rand(1, generator=streams[r]) for r in alive.tolist()])  # (a,)
            picked = sample_next(logits, sampling.temperature, sampling.top_p, uniforms)  # (a,)
            nxt[alive] = picked.cpu()
            lp = (logits.gather(-1, picked.view(-1, 1).to(logits.device)).squeeze(-1) - lse).tolist()  # (a,)
            for j, r in enumerate(alive.tolist()):
                new[r].append(int(nxt[r]))
                ents[r].append(ent[j])
                lps[r].append(lp[j])
                done[r] = self._finished(new[r], sampling, eos)
            if bool(done.all()) or t + 1 == sampling.max_tokens:
                break
            if bool(done[alive].any()):  # drop finished rows from the batch (and their KV cache rows)
                keep = (~done[alive]).nonzero().flatten()
                out.past_key_values.batch_select_indices(keep.to(device))
                alive, mask, pos = alive[keep], mask[keep.to(device)], pos[keep.to(device)]
            one = torch.ones((len(alive), 1), dtype=mask.dtype, device=device)
            mask, pos = torch.cat([mask, one], dim=1), pos[:, -1:] + 1  # (a, L+1), (a, 1)
            out = self._step(nxt[alive][:, None].to(device), mask, pos, out.past_key_values)
        return [self._completion(x, e, sampling, lp) for x, e, lp in zip(new, ents, lps)]

    def _step(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache):
        """One cached forward; only the last position's logits are computed (the next token's)."""
        return self.model(
            input_ids=ids,  # (a, L) the new tokens
            attention_mask=mask,  # (a, cached + L)
            position_ids=pos,  # (a, L)
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )

    def _finished(self, ids: list[int], sampling: SamplingConfig, eos: int | None) -> bool:
        if eos is not None and ids[-1] == eos:
            return True
        if len(ids) < sampling.min_tokens or not sampling.stop:
            return False
        tail = self.tokenizer.decode(ids[-self.STOP_TAIL_TOKENS :], skip_special_tokens=True)
        return any(s in tail for s in sampling.stop)

    def _completion(
        self, new_ids: list[int], entropies: list[float], sampling: SamplingConfig, logprobs: list[float] | None = None
    ) -> Completion:
        """The sampled ids as they are (generation already stopped at EOS or at the token completing a stop string);
        the text is their decoding, cut right after the earliest stop string, as vLLM's include_stop_str_in_output."""
        eos = self.tokenizer.eos_token_id
        if eos in new_ids:  # nothing is sampled after EOS; cut defensively
            new_ids = new_ids[: new_ids.index(eos) + 1]
        text, stopped = truncate_at_stop(self.tokenizer.decode(new_ids, skip_special_tokens=True), sampling.stop)
        ended_by_eos = bool(new_ids) and new_ids[-1] == eos
        reason = "stop" if (stopped or ended_by_eos) else "length"
        n = len(new_ids)
        logprobs = None if logprobs is None else tuple(logprobs[:n])
        return Completion(text, tuple(new_ids), reason, tuple(entropies[:n]), logprobs)
