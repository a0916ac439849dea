"""`ProjectError`: the base of the errors a5 raises itself. Each subclass says what to do in `hint`; a stage ends on
one with a single line `error: <message> (<hint>)` and no traceback (a5core/stage/entry.py `run`)."""

from __future__ import annotations


class ProjectError(Exception):
    """An error the project detected, whose message names the file or key; `hint` says what to do."""

    hint = "see the message"
