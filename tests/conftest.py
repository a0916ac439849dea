import copy

import pytest
import torch

from a5core.model.loading import build_tiny_model


@pytest.fixture(scope="session")
def tiny():
    """(model, tokenizer): a tiny random Llama and a BPE tokenizer trained on synthetic math text."""
    torch.manual_seed(0)
    model, tok = build_tiny_model(seed=0)
    return model, tok


@pytest.fixture(scope="session")
def sharp(tiny):
    """The tiny model with weights scaled up (eval mode), so greedy outputs vary from token to token and a weight
    change moves its log-probs far more than floating-point noise."""
    model = copy.deepcopy(tiny[0])
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0)
    return model.eval(), tiny[1]


def pytest_collection_modifyitems(items):
    """The whole-DAG runs first (`dag`, the longest tests), then the rest of the slow tier, then the fast tier (a
    stable sort: each group keeps its order). Under CI's `-n 2 --dist loadfile --no-loadscope-reorder`, a worker
    takes the next file as it runs out of work, so the last minutes go to short tests on both workers instead of one
    long test on one."""
    items.sort(key=lambda item: (item.get_closest_marker("dag") is None, item.get_closest_marker("slow") is None))
