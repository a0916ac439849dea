"""Answer extraction: which part of a response is the answer, and is the response well formatted?

Each extractor returns (format ok, answer text or None, status) where status is "" when grading should go
on, else the reason it stops ("format_error", "no_answer", "multiple_answers"). All of them are linear
scans with `str.find`/`str.count` (no regex over the response, which is up to 50,000 characters).

* `r1_zero` is the CS336 A5 handout's rule, exactly: format ok iff `"</think> <answer>" in response and
  "</answer>" in response`; the answer is everything after the last `<answer>` with every `</answer>`
  removed; if it contains `\\boxed`, the content of the last `\\boxed{...}` is the answer, and a `\\boxed`
  without a balanced `{...}` right after it scores format 1, answer 0.
* `r1_zero_strict` is the anti-hack rule: exactly one `</think>`, `<answer>` and `</answer>` in that order,
  only whitespace between `</think>` and `<answer>` and after `</answer>`, `<think>` (if any) only at the
  very start; several different boxed answers are `multiple_answers`.
* `question_only` is the handout's: the last `\\boxed{}` of the response, else no answer (format 0).
"""

from __future__ import annotations

import re

MAX_RESPONSE_CHARS = 50_000  # a longer response is refused before extraction (status rejected_input)
_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")


def boxed_contents(text: str) -> list[str]:
    """Contents of every `\\boxed{...}` / `\\fbox{...}` with balanced braces, in order (outer boxes only)."""
    out, i = [], 0
    while True:
        m = _BOX_START.search(text, i)
        if not m:
            return out
        end = _closing_brace(text, m.end() - 1)
        if end is None:
            return out  # unclosed box: ignore the rest
        out.append(text[m.end() : end].strip())
        i = end + 1


def _closing_brace(text: str, open_at: int) -> int | None:
    """Index of the `}` that closes the `{` at text[open_at], counting every brace (as the handout does)."""
    depth = 0
    for j in range(open_at, len(text)):
        c = text[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return j
    return None


def last_boxed(text: str) -> str | None:
    """The handout's `remove_boxed(last_boxed_only_string(text))`: the content of the last `\\boxed{...}`
    (spaces may precede the brace: the handout reads `\\boxed {5}` as `{5}`), or None when the last `\\boxed`
    is not followed by a balanced `{...}` (or there is none)."""
    idx = text.rfind("\\boxed")
    if idx < 0:
        return None
    start = idx + len("\\boxed")
    while start < len(text) and text[start] in " \t\n":
        start += 1
    if not text.startswith("{", start):
        return None
    end = _closing_brace(text, start)
    return None if end is None else text[start + 1 : end]


def extract_r1_zero(response: str) -> tuple[bool, str | None, str]:
    """The handout's r1_zero rule (see the module docstring)."""
    if "</think> <answer>" not in response or "</answer>" not in response:
        return False, None, "format_error"
    answer = response.rpartition("<answer>")[2].replace("</answer>", "")
    if "\\boxed" in answer:
        answer = last_boxed(answer)
        if answer is None:
            return True, None, "no_answer"
    return True, answer, "" if answer.strip() else "no_answer"


def extract_r1_zero_strict(response: str) -> tuple[bool, str | None, str]:
    """Exactly one well-formed answer block at the end (see the module docstring)."""
    if any(response.count(tag) != 1 for tag in ("</think>", "<answer>", "</answer>")):
        return False, None, "format_error"
    think_end, a_open, a_close = response.find("</think>"), response.find("<answer>"), response.find("</answer>")
    if not think_end < a_open < a_close:
        return False, None, "format_error"
    between, after = response[think_end + len("</think>") : a_open], response[a_close + len("</answer>") :]
    think_open = response.count("<think>")
    if between.strip() or after.strip() or think_open > 1 or (think_open and not response.startswith("<think>")):
        return False, None, "format_error"
    body = response[a_open + len("<answer>") : a_close]
    boxes = boxed_contents(body)
    if len({"".join(b.split()) for b in boxes}) > 1:
        return True, body.strip(), "multiple_answers"
    answer = boxes[0] if boxes else body.strip()
    return True, (answer or None), "" if answer else "no_answer"


def extract_question_only(response: str) -> tuple[bool, str | None, str]:
    """The handout's question_only rule: the last `\\boxed{}`; none (or unbalanced) -> format 0."""
    answer = last_boxed(response) if "\\boxed" in response else None
    if answer is None:
        return False, None, "no_answer"
    return True, answer, "" if answer.strip() else "no_answer"


EXTRACTORS = {
    "r1_zero": extract_r1_zero,
    "r1_zero_strict": extract_r1_zero_strict,
    "question_only": extract_question_only,
}
