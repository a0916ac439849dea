"""Generation with transformers' `generate` (the CPU default backend).

Batched with a KV cache and left padding; prompts are sorted by length so each batch pads little; stop
strings end a sequence and are kept in the text; bf16 autocast is used where the CPU has native bf16.
With `n > 1` each prompt is repeated n times inside the batch. The backend generates with the policy
object itself, so a weight "sync" is the identity (no copy can go stale).
"""
from __future__ import annotations

import torch
from tqdm.auto import tqdm

from a5core.config import SamplingConfig
from a5core.generation.base import Completion, truncate_at_stop


def cpu_has_fast_bf16() -> bool:
    """True on CPUs with native bf16 matmul (AMX or AVX512-BF16); elsewhere bf16 autocast is slower."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def autocast_context(device: torch.device, dtype_pref: str = "auto"):
    """bf16 autocast where it is fast (CUDA, or CPUs with AMX/AVX512-BF16); a no-op context otherwise."""
    use = dtype_pref == "bfloat16" or (dtype_pref == "auto" and (device.type == "cuda" or cpu_has_fast_bf16()))
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use)


class HFBackend:
    def __init__(self, model, tokenizer, batch_size: int = 32, dtype: str = "auto"):
        self.model, self.tokenizer, self.batch_size, self.dtype = model, tokenizer, batch_size, dtype
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def sync_weights(self, policy) -> None:
        self.model = policy

    @torch.inference_mode()
    def generate(self, prompts: list[str], sampling: SamplingConfig, progress: bool = True) -> list[list[Completion]]:
        encoded = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
        per_batch = max(1, self.batch_size // max(1, sampling.n))
        results: list[list[Completion]] = [[] for _ in prompts]
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()
        bar = tqdm(total=len(prompts) * sampling.n, desc="generating", unit="seq", disable=not progress, leave=False)
        for b, start in enumerate(range(0, len(order), per_batch)):
            idx = order[start : start + per_batch]
            torch.manual_seed(sampling.seed * 100_003 + b)
            outs = self._generate_batch([encoded[i] for i in idx], sampling, device)
            for j, i in enumerate(idx):
                results[i] = outs[j * sampling.n : (j + 1) * sampling.n]
            bar.update(len(idx) * sampling.n)
        bar.close()
        self.model.train(was_training)
        return results

    def _generate_batch(self, ids: list[list[int]], sampling: SamplingConfig, device) -> list[Completion]:
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), self.pad_id, dtype=torch.long)  # (b, L) left padded
        attention = torch.zeros((len(ids), width), dtype=torch.long)  # (b, L)
        for r, x in enumerate(ids):
            input_ids[r, width - len(x) :] = torch.tensor(x)
            attention[r, width - len(x) :] = 1
        greedy = sampling.temperature <= 0
        kwargs = dict(do_sample=not greedy, max_new_tokens=sampling.max_tokens, min_new_tokens=sampling.min_tokens,
                      num_return_sequences=sampling.n, pad_token_id=self.pad_id, stop_strings=list(sampling.stop) or None,
                      tokenizer=self.tokenizer)
        if not greedy:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        with autocast_context(device, self.dtype):
            out = self.model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device), **kwargs)
        return [self._completion(row[width:].tolist(), sampling) for row in out.cpu()]

    def _completion(self, new_ids: list[int], sampling: SamplingConfig) -> Completion:
        eos = self.tokenizer.eos_token_id
        if eos in new_ids:
            new_ids = new_ids[: new_ids.index(eos)]
            stopped_by_eos = True
        else:
            stopped_by_eos = False
        while new_ids and new_ids[-1] == self.pad_id:
            new_ids.pop()
        text = self.tokenizer.decode(new_ids, skip_special_tokens=True)
        text, stopped = truncate_at_stop(text, sampling.stop)
        if stopped:  # drop tokens generated past the stop string's end
            keep = len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            new_ids = new_ids[:keep]
        reason = "stop" if (stopped or stopped_by_eos) else "length"
        return Completion(text=text, token_ids=tuple(new_ids), finish_reason=reason)
