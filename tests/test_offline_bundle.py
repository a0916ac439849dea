"""tools/offline_bundle.py: the offline install for a GPU node with no registry (issue 47, item 1).

- Fast: hand-made wheels through pack and receive (parts in any order, a corrupt part or another bundle's part refused,
  the install and the import check), slimming, the pruning of skipped requirements, the target's package list.
- Slow (needs the package registry, as the install does): the real bundle for the lent GPU machine (vLLM 0.26.0 for
  its torch 2.11.0, cp312 tags), split, received in shuffled order by a Python 3.12 interpreter, installed with
  `pip --target`, and its import chain checked; and the conflict with the target's numpy and transformers refused
  without `--accept`.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.wheels import make_wheel
from tools import offline_bundle as ob

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "bench" / "gpu" / "h200-packages.txt"


def _python312() -> str | None:
    """A working Python 3.12 here (pyenv's shims answer for versions they do not select, so each is tried)."""
    for candidate in [*sorted(Path("/root/.pyenv/versions").glob("3.12*/bin/python3")), shutil.which("python3.12")]:
        if (
            candidate
            and subprocess.run([str(candidate), "-m", "pip", "--version"], capture_output=True).returncode == 0
        ):
            return str(candidate)
    return None


PY312 = _python312()


@pytest.fixture
def bundle(tmp_path):
    """Two hand-made wheels packed into parts of 300 bytes."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    made = [
        make_wheel(wheels, "tinya", "1.0", {"tinya/__init__.py": "__version__ = '1.0'\n" + "# pad\n" * 200}),
        make_wheel(wheels, "tinyb", "2.0", {"tinyb/__init__.py": "import tinya\n"}),
    ]
    manifest = ob.pack(made, tmp_path / "out", 300, {"vllm": "none"})
    return tmp_path / "out", manifest


def test_pack_splits_into_checked_parts_that_join_to_the_bundle(bundle):
    out, manifest = bundle
    parts = sorted(out.glob("p*/part.*"))
    assert len(parts) == len(manifest["parts"]) >= 3
    assert all(p.stat().st_size <= 300 for p in parts)
    assert sum(p.stat().st_size for p in parts) == manifest["bundle_bytes"]
    assert all(json.loads((p.parent / ob.MANIFEST).read_text()) == manifest for p in parts)


def test_receive_in_any_order_installs_and_imports(bundle, tmp_path, capsys):
    out, manifest = bundle
    order = [out / f"p{i}" for i in range(len(manifest["parts"]))]
    random.Random(1).shuffle(order)
    stage, target = tmp_path / "stage", tmp_path / "site"
    for d in order[:-1]:
        assert ob.receive(d, stage, target, sys.executable, ["tinyb"]) == "waiting"
    said = capsys.readouterr().out
    assert f"{len(order) - 1} of {len(order)} parts" in said and "waiting for part." in said
    assert ob.receive(order[-1], stage, target, sys.executable, ["tinyb", "tinya"]) == "installed"
    assert (target / "tinya" / "__init__.py").exists() and (target / "tinyb-2.0.dist-info").is_dir()
    record = json.loads((target / "a5-bundle.json").read_text())
    assert record["imports"] == {"tinyb": "ok", "tinya": "ok 1.0"}
    assert not list(stage.glob("part.*")), "the parts are removed once installed"


def test_a_corrupt_part_or_another_bundles_part_is_refused(bundle, tmp_path):
    out, _ = bundle
    stage = tmp_path / "stage"
    bad = tmp_path / "bad"
    shutil.copytree(out / "p1", bad)
    part = next(bad.glob("part.*"))
    part.write_bytes(part.read_bytes()[:-1])
    with pytest.raises(ob.BundleError, match="corrupt or cut in transfer"):
        ob.receive(bad, stage, tmp_path / "site", sys.executable, [])
    other = tmp_path / "other"
    shutil.copytree(out / "p0", other)
    manifest = json.loads((other / ob.MANIFEST).read_text())
    ob.receive(out / "p0", stage, tmp_path / "site", sys.executable, [])
    (other / ob.MANIFEST).write_text(json.dumps({**manifest, "bundle_sha256": "0" * 64}))
    with pytest.raises(ob.BundleError, match="belongs to another bundle"):
        ob.receive(other, stage, tmp_path / "site", sys.executable, [])


def test_a_failed_import_is_reported_after_installing(bundle, tmp_path):
    out, manifest = bundle
    with pytest.raises(ob.BundleError, match="installed, but import no_such_module: ModuleNotFoundError"):
        for i in range(len(manifest["parts"])):
            ob.receive(out / f"p{i}", tmp_path / "stage", tmp_path / "site", sys.executable, ["no_such_module"])


def test_slim_drops_the_members_and_their_record_lines(tmp_path):
    w = make_wheel(tmp_path, "vllm", "0.0", {"vllm/__init__.py": "", "vllm/_moe_C_x.abi3.so": "x" * 5000})
    before, after, dropped = ob.slim(w, ob.SLIM["vllm"])
    assert dropped == ["vllm/_moe_C_x.abi3.so"] and after < before
    with zipfile.ZipFile(w) as z:
        assert "vllm/_moe_C_x.abi3.so" not in z.namelist()
        record = z.read("vllm-0.0.dist-info/RECORD").decode()
    assert "_moe_C" not in record and "vllm/__init__.py" in record


def test_prune_leaves_out_skipped_and_what_only_they_need():
    def pick(name, *requires):
        return ob.Pick(name, "1", list(requires), "")

    picks = {
        "app": pick("app", "kern", "web[standard]", "shared"),
        "kern": pick("kern", "kdep", "shared"),
        "kdep": pick("kdep"),
        "shared": pick("shared"),
        "web": pick("web", 'cli; extra == "standard"', 'docs; extra == "docs"'),
        "cli": pick("cli"),
        "docs": pick("docs"),
        "old": pick("old", 'x; python_version < "3"'),
    }
    res = ob.prune(ob.Resolution(picks, {}, [], []), ["app"], {"kern"}, ob.Target("3.12", "2.11.0"), set())
    assert sorted(res.picks) == ["app", "cli", "shared", "web"]
    assert res.skipped == ["docs", "kdep", "kern", "old"]
    # a requirement the target needs that is neither carried nor the target's own is never dropped silently
    lost = {**picks, "app": pick("app", "kern", "web[standard]", "shared", "numpy", "missing>=1")}
    with pytest.raises(ob.BundleError, match="neither carried nor on it: missing$"):
        ob.prune(ob.Resolution(lost, {}, [], []), ["app"], {"kern"}, ob.Target("3.12", "2.11.0"), {"numpy"})


def test_a_bundle_for_another_python_or_torch_is_refused_before_installing(bundle, tmp_path):
    out, manifest = bundle
    here = "%d.%d" % sys.version_info[:2]
    import torch

    torch_here = torch.__version__.split("+")[0]
    assert ob.target_problems({"target": {"python": here, "torch": torch_here}}, sys.executable) == []
    found = ob.target_problems({"target": {"python": "3.99", "torch": "0.0.1"}, "vllm": "0.26.0"}, sys.executable)
    assert found == [
        f"the bundle is for Python 3.99, {sys.executable} is {here}",
        f"the bundle is for torch 0.0.1 (vLLM 0.26.0 pins it), here {torch.__version__}",
    ]


def test_the_target_list_reads_freeze_output_and_bare_names():
    have = ob.parse_have("# c\nTorch==2.11.0+cu130\nmath_verify @ file:///x\nnumba\n\n")
    assert have == {"torch": "2.11.0+cu130", "math-verify": None, "numba": None}
    h200 = ob.parse_have(H200.read_text())
    assert h200["torch"] == "2.11.0" and h200["numpy"] == "2.5.2" and "vllm" not in h200


def _build(out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tools.offline_bundle", "build", "--have", str(H200), "--torch", "2.11.0"]
    cmd += ["--python", "3.12", "--part-mib", "42", "--out", str(out), *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_the_gpu_machines_bundle_builds_splits_and_installs_for_cp312(tmp_path):
    refused = _build(tmp_path / "refused")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "numpy: the target has 2.5.2" in refused.stderr and "transformers: the target has 5.17.0" in refused.stderr

    out = tmp_path / "bundle"
    done = _build(out, "--accept", "numpy", "transformers")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "vLLM 0.26.0 for torch 2.11.0" in done.stdout
    manifest = json.loads((out / ob.MANIFEST).read_text())
    names = {ob.canonical(w["file"].split("-")[0]): w for w in manifest["wheels"]}
    assert {"vllm", "torchao", "math-verify", "latex2sympy2-extended", "antlr4-python3-runtime"} <= set(names)
    assert not {"torch", "numpy", "numba", "transformers", "flashinfer-python"} & set(names)
    assert manifest["built_from_sdist"] == ["antlr4-python3-runtime==4.9.3"]
    assert names["vllm"]["file"].startswith("vllm-0.26.0-") and names["vllm"]["bytes"] < 120e6
    assert any(d.endswith("_vllm_fa2_C.abi3.so") for d in manifest["slimmed"][names["vllm"]["file"]]["dropped"])
    assert all(p["bytes"] <= 42 * 2**20 for p in manifest["parts"]) and len(manifest["parts"]) <= 5

    if PY312 is None:
        pytest.skip("no Python 3.12 interpreter here to install the cp312 bundle with")
    order = sorted(out.glob("p[0-9]*"))
    random.Random(0).shuffle(order)
    stage, site = tmp_path / "stage", tmp_path / "site"

    def receive(part, *extra):
        cmd = [sys.executable, str(ROOT / "tools" / "offline_bundle.py"), "receive", str(part), "--stage", str(stage)]
        cmd += ["--target", str(site), "--python", str(PY312), "--imports", "antlr4", "vllm", *extra]
        return subprocess.run(cmd, capture_output=True, text=True)

    for d in order:
        got = receive(d)
    # this Python 3.12 has no torch: not the machine the bundle was built for, refused before installing ...
    assert got.returncode == 2 and "has no torch here: the bundle needs torch 2.11.0" in got.stderr, got.stderr
    assert not site.exists()
    got = receive(order[-1], "--force")  # ... and installed when told to (its parts were kept)
    # torch is the target's own, so on this machine vLLM's import chain stops there: vLLM itself was found
    assert "import antlr4: ok" in got.stdout, got.stdout + got.stderr
    assert "import vllm: ModuleNotFoundError: No module named 'torch'" in got.stdout, got.stdout + got.stderr
    assert (site / "vllm-0.26.0.dist-info").is_dir() and not (
        site / "vllm" / "vllm_flash_attn" / "_vllm_fa2_C.abi3.so"
    ).exists()


@pytest.mark.slow
def test_the_learners_bundle_carries_the_projects_dependencies_without_vllm(tmp_path):
    """`--no-vllm`: what the first GPU call carries (bench/gpu/README.md): the grader's, torchao, dvclive and what they
    import, one part beside the tree; no vLLM, nothing the machine has."""
    out = tmp_path / "learner"
    done = _build(out, "--no-vllm", "--accept", "numpy", "transformers", "--part-mib", "52")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "vLLM" not in done.stdout
    manifest = json.loads((out / ob.MANIFEST).read_text())
    names = {ob.canonical(w["file"].split("-")[0]) for w in manifest["wheels"]}
    assert {"math-verify", "latex2sympy2-extended", "antlr4-python3-runtime", "torchao", "dvclive", "dvc"} <= names
    assert not {"vllm", "torch", "numpy", "transformers", "pyarrow", "peft"} & names
    assert len(manifest["parts"]) == 1 and manifest["bundle_bytes"] < 40 * 2**20 and manifest["vllm"] is None
