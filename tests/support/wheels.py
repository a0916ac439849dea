"""A minimal valid wheel, made by hand (tests of tools/offline_bundle.py and of the GPU sequence's transfer step)."""

import zipfile
from pathlib import Path


def make_wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A minimal valid pure-Python wheel."""
    info = f"{name}-{version}.dist-info"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    members = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{m},,\n" for m in members) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for m, text in {**members, f"{info}/RECORD": record}.items():
            z.writestr(m, text)
    return path
