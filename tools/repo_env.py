"""The environment a scratch repo's commands run in (the slow tests' scratch repos, bench/grid_check.py's clones).

May import: the standard library.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def repo_env(work: Path) -> dict[str, str]:
    """This venv's tools first on PATH, the repo's own a5core (`work`), a git identity; bytecode on, as on a user's
    machine: __pycache__ in a folder dependency must not change its hash."""
    return {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(work),
        "GIT_AUTHOR_NAME": "a5",
        "GIT_AUTHOR_EMAIL": "a5@localhost",
        "GIT_COMMITTER_NAME": "a5",
        "GIT_COMMITTER_EMAIL": "a5@localhost",
    }
