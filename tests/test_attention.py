"""flash-attn is used only when it imports and runs a forward; otherwise SDPA with a one-line notice. flash-attn cannot
be installed on a CPU machine, so small packages on sys.path stand in for a broken and a working build."""

import sys

import pytest

from a5core.model import loading

BROKEN_IMPORT = 'raise ImportError("flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEa")\n'
BROKEN_CALL = (
    "def flash_attn_func(q, k, v, causal=False):\n"
    "    raise RuntimeError('FlashAttention only supports Ampere GPUs or newer.')\n"
)
WORKING = "def flash_attn_func(q, k, v, causal=False):\n    return q.clone()\n"


@pytest.fixture
def fake_flash_attn(tmp_path, monkeypatch):
    def install(source: str) -> None:
        package = tmp_path / "flash_attn"
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "flash_attn", raising=False)
        loading.flash_attn_failure.cache_clear()

    yield install
    loading.flash_attn_failure.cache_clear()


def test_a_flash_attn_that_does_not_import_falls_back_to_sdpa_with_a_notice(fake_flash_attn, capsys):
    fake_flash_attn(BROKEN_IMPORT)
    assert loading.attn_implementation("cuda") == "sdpa"
    notice = capsys.readouterr().err.strip()
    assert notice.startswith("note: flash-attn is installed but does not run here (ImportError: flash_attn_2_cuda.so")
    assert notice.endswith("using PyTorch SDPA") and "\n" not in notice


def test_a_flash_attn_whose_forward_fails_falls_back(fake_flash_attn, capsys):
    fake_flash_attn(BROKEN_CALL)
    assert loading.flash_attn_failure("cpu") == "RuntimeError: FlashAttention only supports Ampere GPUs or newer."
    assert loading.attn_implementation("cuda") == "sdpa" and "does not run here" in capsys.readouterr().err


def test_a_working_flash_attn_passes_the_probe_and_cpu_never_uses_it(fake_flash_attn, capsys):
    fake_flash_attn(WORKING)
    assert loading.flash_attn_failure("cpu") is None  # the probe itself: import, forward, shape
    assert loading.attn_implementation("cpu") == "sdpa" and capsys.readouterr().err == ""
