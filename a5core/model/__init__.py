"""model: the policy model and how a step runs on the device (the `model` section's settings).
May import base/, grader/, config/, data/.

- loading.py: `model.source` resolved into a Hugging Face folder; arch.py: the decoder's sizes (for the plans)
- tokenization.py, logprobs.py: prompt/output tokens and per-token log-probs (one forward pass)
- compute.py: `Compute`, the `model` section as a stage resolves it once and passes it through its loops
- microbatch.py: how a step's work is cut into micro-batches (`model.micro_batch_tokens`, packing, chunked head)
- autocast.py (bf16 autocast), optim.py (AdamW, schedule, weight update), lora.py (PEFT adapters)
- distributed.py: data-parallel processes on torch.distributed (gloo/nccl, ddp/fsdp2)
"""
