import pytest
import torch

from a5core.model_io import build_tiny_model


@pytest.fixture(scope="session")
def tiny():
    """(model, tokenizer): a tiny random Llama and a BPE tokenizer trained on synthetic math text."""
    torch.manual_seed(0)
    model, tok = build_tiny_model(seed=0)
    return model, tok
