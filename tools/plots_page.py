"""Writes .dvc/plots/page.html, the page `dvc plots show` / `dvc plots diff` fill, with Vega inlined: it works offline.

    python -m tools.plots_page            # downloads the three packages from the npm registry, checks their sha256

DVC's own page loads Vega, Vega-Lite and Vega-Embed from a CDN at view time, so offline (a cluster node, a train)
it is blank. `.dvc/config` points `plots.html_template` at this page instead; it carries the same three releases DVC
3.67's renderer (dvc-render) names, minified, each with its license line. Rerun this only to change the releases.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".dvc" / "plots" / "page.html"
# (package, version, the tarball's sha256 as downloaded on 2026-12-04); the versions dvc-render's SCRIPTS load
PACKAGES = (
    ("vega", "5.20.2", "d77deab01d6104b1239228720721f93003e60797d2faced7ffdd759fa70f989d"),
    ("vega-lite", "5.2.0", "f64ca4745f043447ac86b67dc9e9592ec2b85ac8b8dafc35faf970f142463e4b"),
    ("vega-embed", "6.18.2", "93aeee312e92077b0252ef026c0fe0ec8fa430c19825aeada6cd3a6804e68e1b"),
)
PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>a5: dvc plots</title>
    <!-- Vega, Vega-Lite and Vega-Embed inlined (BSD-3-Clause, the Vega project): written by tools/plots_page.py -->
{inlined}
    <style>
        body { font-family: sans-serif; }
        table { border-spacing: 15px; }
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""


def script(package: str, version: str, sha256: str) -> str:
    """The package's minified build as an inline <script>, after checking the tarball's sha256."""
    url = f"https://registry.npmjs.org/{package}/-/{package}-{version}.tgz"
    data = urllib.request.urlopen(url, timeout=60).read()
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise SystemExit(f"{url}: sha256 {got}, expected {sha256}")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        code = tar.extractfile(f"package/build/{package}.min.js").read().decode()
    if "</script" in code or "{plot_divs}" in code:
        raise SystemExit(f"{package} {version}: its code would end the <script> or fill DVC's placeholder")
    return f"    <script>/* {package} {version}, BSD-3-Clause, https://github.com/vega */\n{code}\n    </script>"


def main() -> None:
    inlined = "\n".join(script(*p) for p in PACKAGES)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(PAGE.replace("{inlined}", inlined))
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
