"""Stage code_hashes: one file per package of what the stages execute (a5core/base/code.py), the other stages' code
deps. It reruns on any edit under a5core/, rewards/ or stages/ (under a second; it imports no torch); a file it writes
changes only when executed code did, so a docstring, a comment or a console message reruns nothing below it."""

import argparse
from pathlib import Path

from a5core.base.code import write_hashes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the folder of hash files (dvc.yaml)")
    out = Path(ap.parse_args().out)
    changed = write_hashes(Path.cwd(), out)
    print(f"code_hashes: {len(changed)} package(s) whose executed code changed: {', '.join(changed) or 'none'}")


if __name__ == "__main__":
    main()
