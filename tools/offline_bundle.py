"""An offline install for a GPU node with no package registry (an air-gapped cluster node, the lent GPU machine).

    # here, with a registry: what the target lacks for its torch, as parts of at most 42 MiB
    python -m tools.offline_bundle build --have target-packages.txt --torch 2.11.0 --python 3.12 \
        --accept numba transformers --part-mib 42 --out .bundle
    # there (Python's standard library and pip only), once per part, in any order, in one or several sessions:
    python3 tools/offline_bundle.py receive .bundle/p0 --stage /tmp/a5-bundle --target /tmp/site
    # after the last part it verifies every checksum, runs `pip install --no-index --no-deps --target /tmp/site`
    # and imports vllm and a5core with PYTHONPATH=/tmp/site:<repo>; run the project there with that PYTHONPATH

- `--have`: the target's packages, as `python3 -m pip list --format=freeze` prints them there (bare names are read
  too; a name without a version is taken as present and unchecked). The target's packages are never replaced: a
  requirement they do not satisfy stops the build with one line per conflict, unless the package is named in
  `--accept` (keep the target's version anyway). bench/gpu/h200-packages.txt is the lent GPU machine's list.
- The vLLM release: `--vllm X`, or the newest release whose own requirement on torch admits `--torch` (vLLM pins
  one torch exactly: 0.20.2-0.26.0 pin 2.11.0, 0.27+ pin 2.13.0). Then the project's own dependencies
  (pyproject.toml, less `--without`), with torch pinned to the target's.
- Resolution: pip's own (`pip --python <env> install --dry-run --report`, the target's Python and platform tags;
  pip reads only the wheels' metadata), in a bare environment holding the target's packages as installed
  (metadata only), so it resolves around them; what it would install is what the bundle carries, less the target's
  own packages. A requirement with no wheel for the target is built from its sdist here (`pip wheel`; it must come
  out pure Python).
- Left out (`--skip`, default SKIP below): vLLM requirements it imports only for features the project does not use,
  and whatever only they need.
- Slimming (`--no-slim` keeps it whole): vLLM's wheel without the FlashAttention-2 kernels (FA3 serves Hopper), the
  MoE kernels, the Rust router binary, other Pythons' deep_gemm builds, the sm100 FMHA headers and the web UI's
  static files (SLIM below; each a guarded import or unused by an offline engine).
- The bundle: one tar of the wheels, split into parts of `--part-mib`, each part in its own folder with
  `manifest.json` (every wheel's, part's and the whole tar's sha256 and size). `receive` checks each part as it
  arrives (a corrupt part is refused at once), says which parts it has and which it waits for, and after the last
  checks that this machine is the one it was built for (its Python and torch; for a slimmed vLLM, a Hopper GPU or
  newer: `--force` overrides), joins, verifies, installs and runs the import check (`--imports`, default `vllm
  a5core`) and `pip check`, writing `<target>/a5-bundle.json`.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "manifest.json"
TAR = "bundle.tar"
# Members dropped from vLLM's wheel by `slim` (the reference measurement: 303.7 MB -> 110.8 MB for 0.26.0).
SLIM = {
    "vllm": (
        "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",  # FlashAttention-2 kernels: FA3 serves sm90
        "vllm/_moe_C*.so",  # mixture-of-experts kernels: the project's models are dense
        "vllm/vllm-rs",  # the Rust router binary
        "vllm/third_party/deep_gemm/_C.cpython-31[0134]-*.so",  # deep_gemm for the Pythons the target is not
        "vllm/third_party/fmha_sm100/*",  # Blackwell FMHA headers
        "vllm/entrypoints/serve/instrumentator/static/*",  # the server's web UI
    )
}
# vLLM requirements the bundle leaves out by default (`--skip`): kernels and libraries vLLM imports only when a
# feature asks for them (FlashInfer and its CUTLASS DSL / TileLang / cuda-tile kernels, quack and tokenspeed kernels,
# video decoding, fast safetensors loading); without them the engine takes its own FA3 and Triton paths. 0.26.0's
# import chain loads without them (the reference measurement); what an engine start needs is checked on the GPU.
SKIP = (
    "flashinfer-python",
    "flashinfer-cubin",
    "nvidia-cutlass-dsl",
    "nvidia-cudnn-frontend",
    "quack-kernels",
    "humming-kernels",
    "tilelang",
    "cuda-tile",
    "tokenspeed-triton",
    "tokenspeed-mla",
    "pynvvideocodec",
    "torchcodec",
    "fastsafetensors",
)
MANYLINUX = ("2_17", "2_24", "2_27", "2_28", "2_31", "2_34", "2_35")


class BundleError(RuntimeError):
    """A build or receive that cannot go on; its message is what the user reads."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def canonical(name: str) -> str:
    """PEP 503's normalized name: `Math_Verify` and `math-verify` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_have(text: str) -> dict[str, str | None]:
    """The target's packages from `pip list --format=freeze` (or bare names): normalized name -> version or None."""
    have: dict[str, str | None] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        have[canonical(name.split(" @ ")[0].strip())] = version.strip() or None
    return have


# ---------------------------------------------------------------------------------------------------------- build


@dataclass(frozen=True)
class Target:
    """The machine the bundle is for: its Python, platform tags and torch."""

    python: str  # "3.12"
    torch: str  # "2.11.0": vLLM's release is chosen for it, and every requirement on torch is checked against it
    platforms: tuple[str, ...] = tuple(f"manylinux_{v}_x86_64" for v in MANYLINUX) + (
        "manylinux2014_x86_64",
        "manylinux1_x86_64",
        "linux_x86_64",
    )

    def markers(self, extra: str = "") -> dict[str, str]:
        """The environment PEP 508 markers are evaluated in."""
        return {
            "python_version": self.python,
            "python_full_version": f"{self.python}.0",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "platform_machine": "x86_64",
            "os_name": "posix",
            "extra": extra,
        }

    def pip_flags(self) -> list[str]:
        flags = ["--only-binary=:all:", "--python-version", self.python, "--implementation", "cp"]
        for p in self.platforms:
            flags += ["--platform", p]
        return flags


@dataclass(frozen=True)
class Pick:
    """One carried package: the version chosen, its requirements, where its wheel comes from."""

    name: str
    version: str
    requires: list[str]
    url: str


def _pip(args: list[str], quiet: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", *args] + (["-q"] if quiet else [])
    return subprocess.run(cmd, capture_output=True, text=True)


def query(reqs: list[str], target: Target, find_links: Path) -> dict[str, Pick]:
    """The newest version of each requirement with a wheel for the target, its metadata only (pip's dry run)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        args = ["install", "--dry-run", "--no-deps", "--ignore-installed", "--report", str(report)]
        args += ["--target", str(Path(tmp) / "t"), "--find-links", str(find_links), *target.pip_flags(), *reqs]
        done = _pip(args)
        if done.returncode != 0:
            raise BundleError(_pip_error(done.stderr, reqs))
        picks = {}
        for item in json.loads(report.read_text())["install"]:
            meta = item["metadata"]
            picks[canonical(meta["name"])] = Pick(
                meta["name"], meta["version"], meta.get("requires_dist", []), item["download_info"]["url"]
            )
        return picks


def _pip_error(stderr: str, reqs: list[str]) -> str:
    lines = [x for x in stderr.splitlines() if x.startswith("ERROR") and "is ignored" not in x]
    return f"pip found no wheel for the target among {' '.join(reqs)}: " + (lines[0] if lines else stderr[-300:])


def choose_vllm(target: Target, find_links: Path) -> str:
    """The newest vLLM release whose requirement on torch admits the target's torch."""
    from packaging.requirements import Requirement  # build only: receive runs with the standard library and pip
    from packaging.version import Version

    listed = _pip(["index", "versions", "vllm"], quiet=False)
    found = re.search(r"Available versions: (.*)", listed.stdout)
    if listed.returncode != 0 or not found:
        raise BundleError(f"cannot list vLLM's releases: {listed.stderr.strip()[-300:]}")
    for version in sorted((Version(v) for v in found.group(1).split(", ")), reverse=True):
        if version.is_prerelease:
            continue
        pick = query([f"vllm=={version}"], target, find_links)["vllm"]
        torch = [Requirement(r) for r in pick.requires if canonical(Requirement(r).name) == "torch"]
        if torch and all(r.specifier.contains(target.torch, prereleases=True) for r in torch):
            return str(version)
    raise BundleError(f"no vLLM release pins a torch that admits {target.torch}")


def project_requirements(pyproject: Path, without: set[str]) -> list[str]:
    """The project's runtime dependencies from pyproject.toml, less the named ones and torch (the target's own)."""
    from packaging.requirements import Requirement

    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [d for d in deps if canonical(Requirement(d).name) not in without | {"torch"}]


@dataclass
class Resolution:
    """What the bundle carries, what it leaves to the target, and the conflicts the user accepted."""

    picks: dict[str, Pick]
    kept: dict[str, str | None]  # target packages pip chose another version of (or never saw the version of)
    accepted: list[str]  # one line per accepted conflict
    built: list[str]  # requirements built here from their sdist
    skipped: list[str] = ()  # left out: the --skip names and what only they need


def prune(res: Resolution, roots: list[str], skip: set[str], target: Target, have: set[str]) -> Resolution:
    """Leave out the `skip` packages and every package reachable from the roots only through them. A requirement the
    target's environment needs that is neither carried, nor the target's (`have`), nor skipped stops the build."""
    from packaging.requirements import Requirement

    reached: set[str] = set()
    lost: set[str] = set()
    seen: set[tuple[str, str]] = set()  # (package, extra): a package is walked once per extra asked of it
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        name = canonical(req.name)
        if name in skip or name in have or name == "torch":
            continue
        if name not in res.picks:
            lost.add(name)
            continue
        reached.add(name)
        for extra in [""] + sorted(req.extras):
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            for line in res.picks[name].requires:
                dep = Requirement(line)
                if dep.marker is None or dep.marker.evaluate(target.markers(extra)):
                    todo.append(dep)
    if lost:
        raise BundleError(f"required for the target but neither carried nor on it: {', '.join(sorted(lost))}")
    gone = sorted(set(res.picks) - reached)
    return Resolution({n: p for n, p in res.picks.items() if n in reached}, res.kept, res.accepted, res.built, gone)


def target_python(version: str) -> str:
    """An interpreter of the target's Python here (pip evaluates requirements' markers with the interpreter it runs
    under, whatever --python-version says): python<version> on PATH, or pyenv's; else this one, with a warning."""
    pyenv = sorted(Path("~/.pyenv/versions").expanduser().glob(f"{version}*/bin/python3"))
    candidates = [shutil.which(f"python{version}"), *pyenv]
    for c in candidates:
        if not c:
            continue
        check = [str(c), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
        done = subprocess.run(check, capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.strip() == version:
            return str(c)
    here = "%d.%d" % sys.version_info[:2]
    if here != version:
        print(f"warning: no Python {version} here: markers are evaluated for {here} (pass --env-python)")
    return sys.executable


def fake_environment(folder: Path, have: dict[str, str | None], python: str) -> Path:
    """A bare environment of `python` whose installed packages are the target's known versions (metadata only, no
    requirements), so pip's resolver treats them as installed; returns its interpreter."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next(folder.glob("lib/python3*/site-packages"))
    for name, version in have.items():
        if version is None:
            continue
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text("")
    return folder / "bin" / "python"


def resolve(
    roots: list[str], have: dict[str, str | None], target: Target, accept: set[str], links: Path, python: str
) -> Resolution:
    """pip's resolver (dry run, the target's tags) over `roots`, in an environment holding the target's packages:
    what it would install is what the bundle carries, except the target's own packages, which are never replaced
    (a conflict stops the build unless the package is in `accept`). Requirements with no wheel are built from their
    sdist (pure Python only) and the resolution is repeated."""
    have = {**have, "torch": target.torch}
    res = Resolution({}, {}, [], [])
    with tempfile.TemporaryDirectory() as tmp:
        python = fake_environment(Path(tmp) / "env", have, python)
        report = Path(tmp) / "report.json"
        args = ["--python", str(python), "install", "--dry-run", "--report", str(report), "--find-links", str(links)]
        for _ in range(5):
            done = _pip([*args, *target.pip_flags(), *roots])
            missing = re.search(r"No matching distribution found for (\S+)", done.stderr)
            if done.returncode == 0 or not missing:
                break
            res.built.append(_build_sdist(missing.group(1), links))
        if done.returncode != 0:
            raise BundleError(_pip_error(done.stderr, roots))
        installs = json.loads(report.read_text())["install"]
    conflicts = []
    for item in installs:
        meta = item["metadata"]
        name = canonical(meta["name"])
        if name in have:
            res.kept[name] = have[name]
            if have[name] is not None:
                line = f"{name}: the target has {have[name]}, the resolution needs {meta['version']}"
                (res.accepted if name in accept else conflicts).append(line)
            continue
        res.picks[name] = Pick(
            meta["name"], meta["version"], meta.get("requires_dist", []), item["download_info"]["url"]
        )
    if conflicts:
        raise BundleError(
            "the target's packages conflict with what the bundle needs (keep the target's with --accept NAME, or "
            "carry a version that fits with --pin NAME==X):\n  " + "\n  ".join(sorted(conflicts))
        )
    return res


def _build_sdist(requirement: str, find_links: Path) -> str:
    """Build a pure-Python wheel from a requirement's sdist here, into the folder every query also searches."""
    before = set(find_links.glob("*.whl"))
    done = _pip(["wheel", "--no-deps", "--no-binary=:all:", "-w", str(find_links), requirement])
    made = sorted(set(find_links.glob("*.whl")) - before)
    if done.returncode != 0 or not made:
        raise BundleError(f"{requirement}: no wheel for the target and its sdist does not build: {done.stderr[-300:]}")
    if not all(p.name.endswith("-py3-none-any.whl") or p.name.endswith("-py2.py3-none-any.whl") for p in made):
        raise BundleError(f"{requirement}: its sdist built a platform wheel ({made[0].name}), not one for the target")
    return requirement


def slim(wheel: Path, patterns: tuple[str, ...]) -> tuple[int, int, list[str]]:
    """Drop the members matching `patterns` from a wheel (and their RECORD lines); returns sizes and what went."""
    before = wheel.stat().st_size
    out = wheel.with_suffix(".slim")
    dropped = []
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as dst:
        for info in src.infolist():
            if any(fnmatch.fnmatch(info.filename, p) for p in patterns):
                dropped.append(info.filename)
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                kept = [x for x in data.decode().splitlines() if x.split(",")[0] not in set(dropped)]
                data = ("\n".join(kept) + "\n").encode()
            dst.writestr(info, data, compress_type=info.compress_type)
    out.replace(wheel)
    return before, wheel.stat().st_size, dropped


def download(picks: dict[str, Pick], target: Target, find_links: Path, dest: Path) -> list[Path]:
    """The chosen wheels, by exact version, into dest (the sdist-built ones copied from find_links)."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = [f"{p.name}=={p.version}" for p in picks.values()]
    done = _pip(["download", "--no-deps", "-d", str(dest), "--find-links", str(find_links), *target.pip_flags(), *pins])
    if done.returncode != 0:
        raise BundleError(_pip_error(done.stderr, pins))
    wheels = sorted(dest.glob("*.whl"))
    names = {canonical(w.name.split("-")[0]) for w in wheels}
    missing = sorted(set(picks) - names)
    if missing:
        raise BundleError(f"pip downloaded no wheel for {', '.join(missing)}")
    return wheels


def pack(wheels: list[Path], out: Path, part_bytes: int, about: dict) -> dict:
    """One tar of the wheels, split into parts of at most part_bytes, each in its own folder with the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("p[0-9]*"):
        shutil.rmtree(old)
    tar = out / TAR
    with tarfile.open(tar, "w", format=tarfile.PAX_FORMAT) as t:
        for w in wheels:
            t.add(w, arcname=w.name)
    manifest = {
        **about,
        "wheels": [{"file": w.name, "sha256": _sha256(w), "bytes": w.stat().st_size} for w in wheels],
        "bundle_sha256": _sha256(tar),
        "bundle_bytes": tar.stat().st_size,
        "parts": [],
    }
    with tar.open("rb") as f:
        for i, chunk in enumerate(iter(lambda: f.read(part_bytes), b"")):
            name = f"part.{i:03d}"
            manifest["parts"].append({"file": name, "sha256": hashlib.sha256(chunk).hexdigest(), "bytes": len(chunk)})
            (out / f"p{i}").mkdir()
            (out / f"p{i}" / name).write_bytes(chunk)
    tar.unlink()
    text = json.dumps(manifest, indent=1)
    for i in range(len(manifest["parts"])):
        (out / f"p{i}" / MANIFEST).write_text(text)
    (out / MANIFEST).write_text(text)
    return manifest


def build(args: argparse.Namespace) -> dict:
    target = Target(python=args.python, torch=args.torch)
    have = parse_have(Path(args.have).read_text())
    work = Path(tempfile.mkdtemp(prefix="a5-bundle-"))
    try:
        links = work / "built"
        links.mkdir()
        vllm = None if args.no_vllm else args.vllm or choose_vllm(target, links)
        if vllm:
            print(f"vLLM {vllm} for torch {target.torch} (Python {target.python})", flush=True)
        roots = [f"vllm=={vllm}"] * bool(vllm) + list(args.pin)
        if not args.no_project:
            roots += project_requirements(Path(args.pyproject), {canonical(n) for n in args.without})
        accept = {canonical(n) for n in args.accept}
        python = args.env_python or target_python(target.python)
        resolved = resolve(roots, have, target, accept, links, python)
        res = prune(resolved, roots, {canonical(n) for n in args.skip}, target, set(have))
        if res.skipped:
            print(f"left out ({len(res.skipped)}): {' '.join(res.skipped)}")
        for line in res.accepted:
            print(f"accepted: {line}")
        print(f"{len(res.picks)} packages to carry; the target's own serve {len(res.kept)} requirements", flush=True)
        wheels = download(res.picks, target, links, work / "wheels")
        slimmed = {}
        for w in wheels:
            patterns = SLIM.get(canonical(w.name.split("-")[0]), ())
            if patterns and not args.no_slim:
                before, after, dropped = slim(w, patterns)
                slimmed[w.name] = {"bytes_before": before, "bytes_after": after, "dropped": dropped}
                print(f"slimmed {w.name}: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB ({len(dropped)} files)")
        about = {
            "target": {"python": target.python, "torch": target.torch, "platforms": list(target.platforms)},
            "vllm": vllm,
            "accepted": res.accepted,
            "built_from_sdist": res.built,
            "kept_from_target": res.kept,
            "skipped": res.skipped,
            "slimmed": slimmed,
        }
        manifest = pack(wheels, Path(args.out), int(args.part_mib * 2**20), about)
        total = manifest["bundle_bytes"] / 2**20
        print(f"{len(wheels)} wheels, {total:.1f} MiB in {len(manifest['parts'])} parts of <= {args.part_mib} MiB")
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -------------------------------------------------------------------------------------------------------- receive


def receive(part_dir: Path, stage: Path, target: Path, python: str, imports: list[str], force: bool = False) -> str:
    """Store one part (checked against its manifest); after the last, join, verify, install and check the imports.
    Returns "waiting" or "installed"."""
    manifest = json.loads((part_dir / MANIFEST).read_text())
    stage.mkdir(parents=True, exist_ok=True)
    held = stage / MANIFEST
    if held.exists() and json.loads(held.read_text())["bundle_sha256"] != manifest["bundle_sha256"]:
        raise BundleError(f"{part_dir} belongs to another bundle than the parts in {stage}: empty {stage} first")
    held.write_text(json.dumps(manifest))
    expected = {p["file"]: p for p in manifest["parts"]}
    for part in sorted(part_dir.glob("part.*")):
        if part.name not in expected or _sha256(part) != expected[part.name]["sha256"]:
            raise BundleError(f"{part} is not the part the manifest names (corrupt or cut in transfer): resend it")
        shutil.copyfile(part, stage / part.name)
    have = [n for n in expected if (stage / n).exists() and _sha256(stage / n) == expected[n]["sha256"]]
    missing = [n for n in expected if n not in have]
    print(f"bundle {manifest['bundle_sha256'][:12]}: {len(have)} of {len(expected)} parts", flush=True)
    if missing:
        print(f"waiting for {', '.join(missing)}")
        return "waiting"
    return install(stage, manifest, target, python, imports, force)


def target_problems(manifest: dict, python: str) -> list[str]:
    """Why this machine is not the one the bundle was built for: its Python, its torch (the bundle's vLLM pins it),
    and, for a bundle slimmed to FlashAttention-3, a GPU older than Hopper (nvidia-smi, when there is one)."""
    want = manifest.get("target", {})
    probe = "import sys, importlib.metadata as m; print('%d.%d' % sys.version_info[:2]); print(m.version('torch'))"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    lines = done.stdout.split()
    found = []
    if done.returncode != 0 or len(lines) != 2:
        return [f"{python} has no torch here: the bundle needs torch {want.get('torch')} installed"]
    if want.get("python") and lines[0] != want["python"]:
        found.append(f"the bundle is for Python {want['python']}, {python} is {lines[0]}")
    if want.get("torch") and lines[1].split("+")[0] != want["torch"]:
        found.append(f"the bundle is for torch {want['torch']} (vLLM {manifest.get('vllm')} pins it), here {lines[1]}")
    if manifest.get("slimmed") and shutil.which("nvidia-smi"):
        caps = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.split()
        old = [c for c in caps if c.replace(".", "").isdigit() and float(c) < 9.0]
        if old:
            found.append(f"the bundle's vLLM was slimmed to FlashAttention-3 (Hopper); this GPU is {old[0]}: --no-slim")
    return found


def install(stage: Path, manifest: dict, target: Path, python: str, imports: list[str], force: bool = False) -> str:
    problems = target_problems(manifest, python)
    if problems and not force:
        raise BundleError("not the machine the bundle was built for (--force installs anyway): " + "; ".join(problems))
    tar = stage / TAR
    h = hashlib.sha256()
    with tar.open("wb") as out:
        for part in manifest["parts"]:
            data = (stage / part["file"]).read_bytes()
            h.update(data)
            out.write(data)
    if h.hexdigest() != manifest["bundle_sha256"]:
        raise BundleError(f"the joined parts in {stage} are not the bundle (sha256 {h.hexdigest()[:12]}): resend them")
    wheels = stage / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    with tarfile.open(tar) as t:
        t.extractall(wheels, filter="data")
    for w in manifest["wheels"]:
        if _sha256(wheels / w["file"]) != w["sha256"]:
            raise BundleError(f"{w['file']} in the bundle does not match its manifest entry")
    cmd = [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir"]
    cmd += ["--upgrade", "--target", str(target), *sorted(str(p) for p in wheels.glob("*.whl"))]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise BundleError(f"pip could not install the bundle into {target}: {done.stderr.strip()[-500:]}")
    for leftover in [tar, *stage.glob("part.*")]:
        leftover.unlink()
    shutil.rmtree(wheels)
    print(f"installed {len(manifest['wheels'])} wheels into {target}")
    checked = check_imports(target, python, imports)
    env = {**os.environ, "PYTHONPATH": str(target)}
    pip_check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True, env=env).stdout
    record = {**manifest, "imports": checked, "pip_check": pip_check.splitlines(), "target_problems": problems}
    (target / "a5-bundle.json").write_text(json.dumps(record, indent=1))
    failed = [m for m, r in checked.items() if not r.startswith("ok")]
    if failed:
        raise BundleError("installed, but " + "; ".join(f"import {m}: {checked[m]}" for m in failed))
    return "installed"


def check_imports(target: Path, python: str, modules: list[str]) -> dict[str, str]:
    """Import each module in a fresh interpreter with the bundle first on the path (and the repository, for a5core):
    module -> "ok <version>" or the exception's last line."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(root)])}
    results = {}
    for m in modules:
        code = f"import importlib.metadata as md, {m} as x; print(getattr(x, '__version__', '') or '')"
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env)
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        results[m] = f"ok {done.stdout.strip()}".strip() if done.returncode == 0 else last
        print(f"import {m}: {results[m]}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="here, with a registry: resolve, download, slim, split")
    b.add_argument("--have", required=True, help="the target's `pip list --format=freeze` (or bare names)")
    b.add_argument("--torch", required=True, help="the target's torch version, e.g. 2.11.0")
    b.add_argument("--python", default="3.12", help="the target's Python, major.minor")
    b.add_argument("--vllm", help="this vLLM release instead of the newest that pins --torch")
    b.add_argument("--accept", nargs="*", default=[], help="keep the target's version of these despite a requirement")
    b.add_argument("--pin", nargs="*", default=[], help="extra requirements, e.g. transformers==5.17.0")
    b.add_argument("--without", nargs="*", default=[], help="project dependencies not to carry (e.g. dvc)")
    b.add_argument("--skip", nargs="*", default=list(SKIP), help="requirements to leave out (default: SKIP)")
    b.add_argument("--no-project", action="store_true", help="vLLM only, not the project's dependencies")
    b.add_argument("--no-vllm", action="store_true", help="the project's dependencies only (the learner's bundle)")
    b.add_argument("--no-slim", action="store_true", help="keep vLLM's wheel whole")
    b.add_argument("--env-python", help="an interpreter of the target's Python (default: found here)")
    b.add_argument("--part-mib", type=float, default=42, help="the largest part, in MiB")
    b.add_argument("--pyproject", default=str(Path(__file__).resolve().parents[1] / "pyproject.toml"))
    b.add_argument("--out", default=".bundle", help="the parts' folder: <out>/p0, p1, ...")
    r = sub.add_parser("receive", help="there: store a part; after the last, verify, install, check imports")
    r.add_argument("part", type=Path, help="one part's folder (<out>/pI)")
    r.add_argument("--stage", type=Path, default=Path(tempfile.gettempdir()) / "a5-bundle")
    r.add_argument("--target", type=Path, default=Path(tempfile.gettempdir()) / "site")
    r.add_argument("--python", default=sys.executable, help="the interpreter to install for (pip --target)")
    r.add_argument("--imports", nargs="*", default=["vllm", "a5core"], help="modules to import after installing")
    r.add_argument("--force", action="store_true", help="install on a machine other than the one built for")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "build":
            build(args)
        else:
            receive(args.part, args.stage, args.target, args.python, args.imports, args.force)
    except BundleError as e:
        print(f"offline_bundle: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
