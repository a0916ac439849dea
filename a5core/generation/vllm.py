"""Generation with vLLM (GPU path, `pip install -e .[gpu]`), imported lazily.

Weight sync follows the handout: the engine lives in-process (V1 multiprocessing off,
`VLLM_ENABLE_V1_MULTIPROCESSING=0`) and each worker's model receives the policy's tensors through
`collective_rpc` -> `model.load_weights`. `reload_weights()` without arguments would reload the original
checkpoint from disk — the known trap — so it is never used. After each sync the engine's greedy output
on a probe prompt is compared with the policy's own greedy output.
"""
from __future__ import annotations

import os

import torch

from a5core.config import GenerationConfig, SamplingConfig
from a5core.generation.base import Completion

PROBE_PROMPT = "User: What is 2 + 3?\nAssistant: <think>"


class WeightSyncError(RuntimeError):
    """The engine does not reproduce the policy after a weight update."""


def _load_weights_on_worker(worker, weights):
    """Runs inside each vLLM worker (via collective_rpc)."""
    worker.model_runner.model.load_weights(weights=weights)
    return True


class VLLMBackend:
    def __init__(self, model_path: str, cfg: GenerationConfig, seed: int = 0, llm=None, vllm_module=None, tokenizer=None):
        if vllm_module is None:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            try:
                import vllm as vllm_module
            except ImportError as e:
                raise ImportError("generation.backend=vllm needs the GPU extra: pip install -e '.[gpu]'") from e
        self.vllm, self.cfg, self.tokenizer = vllm_module, cfg, tokenizer
        self.llm = llm or vllm_module.LLM(
            model=model_path, dtype="bfloat16" if cfg.dtype == "auto" else cfg.dtype, seed=seed,
            gpu_memory_utilization=cfg.gpu_memory_utilization, enable_prefix_caching=True,
        )

    def sampling_params(self, sampling: SamplingConfig, greedy: bool = False):
        return self.vllm.SamplingParams(
            n=1 if greedy else sampling.n, temperature=0.0 if greedy else sampling.temperature, top_p=1.0 if greedy else sampling.top_p,
            max_tokens=sampling.max_tokens, min_tokens=sampling.min_tokens, stop=list(sampling.stop),
            include_stop_str_in_output=True, seed=sampling.seed,
        )

    def generate(self, prompts: list[str], sampling: SamplingConfig, progress: bool = True) -> list[list[Completion]]:
        outputs = self.llm.generate(prompts, self.sampling_params(sampling), use_tqdm=progress)
        return [[Completion(o.text, tuple(o.token_ids), "stop" if o.finish_reason == "stop" else "length") for o in out.outputs]
                for out in outputs]

    def sync_weights(self, policy) -> None:
        """Push the policy's weights into the engine in-process, then verify (when configured)."""
        weights = [(name, t.detach()) for name, t in policy.state_dict().items()]
        self.llm.collective_rpc(_load_weights_on_worker, args=(weights,))
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        if self.cfg.verify_weight_sync and self.tokenizer is not None:
            self.verify(policy)

    @torch.inference_mode()
    def verify(self, policy, n_tokens: int = 4) -> None:
        """The engine's greedy tokens on a probe prompt must equal the policy's own greedy tokens."""
        probe = SamplingConfig(temperature=0.0, max_tokens=n_tokens, min_tokens=n_tokens, stop=[], n=1)
        engine_ids = list(self.generate([PROBE_PROMPT], probe, progress=False)[0][0].token_ids)[:n_tokens]
        ids = torch.tensor([self.tokenizer(PROBE_PROMPT, add_special_tokens=False)["input_ids"]], device=next(policy.parameters()).device)
        policy_ids = policy.generate(input_ids=ids, max_new_tokens=n_tokens, min_new_tokens=n_tokens, do_sample=False)[0, ids.shape[1]:].tolist()
        if engine_ids != policy_ids[: len(engine_ids)] or not engine_ids:
            raise WeightSyncError(f"vLLM engine greedy ids {engine_ids} != policy greedy ids {policy_ids}: weights were not synced")
