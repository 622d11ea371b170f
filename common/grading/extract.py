"""Answer extraction: the final answer of a response,
read as its answer mode says (the ANSWER_MODES registry).

* ``"boxed"``: the content of the LAST ``\\boxed{...}`` (or ``\\fbox{...}``); a correct number written
  anywhere else is ignored.
* ``"answer_line"``: DAPO's format, the last match of ``(?i)Answer\\s*:\\s*([^\\n]+)`` (DAPO's regex; unlike
  DAPO the response is not first cut to its last 300 characters).
* ``"boxed_or_answer_line"``: the last box if there is one, else the answer line.

A new mode is one registered function ``text -> str | None`` (``@ANSWER_MODES.register("name")``); it is then
a valid ``reward.answer_mode`` (config validation reads the registry), ``Grader`` mode and ``extract_answer``
mode. Extraction is total: it never raises on a response (a non-string gives None).
"""
from __future__ import annotations

import re

from common.registry import Registry

__all__ = ["ANSWER_MODES", "MODES", "check_mode", "extract_answer", "extract_answer_line", "extract_boxed"]

#: answer mode -> extractor (text -> final answer or None); ``reward.answer_mode`` chooses one
ANSWER_MODES = Registry("answer mode", "reward.answer_mode")

_BOX_CMDS = ("\\boxed", "\\fbox")


def _last_box_start(text: str) -> tuple[int, int] | None:
    """(start, end-of-command) of the last \\boxed / \\fbox command (not a prefix of a longer name)."""
    end = len(text)
    while True:
        best = -1
        best_cmd = ""
        for cmd in _BOX_CMDS:
            i = text.rfind(cmd, 0, end)
            if i > best:
                best, best_cmd = i, cmd
        if best < 0:
            return None
        j = best + len(best_cmd)
        if j < len(text) and text[j].isalpha():  # e.g. \boxedness: not the command
            end = best
            continue
        return best, j


@ANSWER_MODES.register("boxed")
def extract_boxed(text: str) -> str | None:
    """Content of the LAST ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``; None if there is none.

    Braces are matched with nesting (``\\boxed{\\frac{1}{2}}`` -> ``\\frac{1}{2}``); escaped braces ``\\{``
    ``\\}`` do not count. ``\\boxed 5`` (no braces) gives ``5``. If the last box is unterminated (a truncated
    response) the result is None: the final answer is what counts, and it is missing. Runs in linear time.
    """
    if not isinstance(text, str):
        return None
    loc = _last_box_start(text)
    if loc is None:
        return None
    _, j = loc
    n = len(text)
    while j < n and text[j] in " \t":
        j += 1
    if j >= n:
        return None
    if text[j] != "{":
        m = re.match(r"[^\s$]+", text[j:j + 1000])
        return m.group(0) if m else None
    depth = 0
    k = j
    while k < n:
        c = text[k]
        if c == "\\":
            k += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[j + 1:k].strip()
        k += 1
    return None


_ANSWER_LINE_RE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")


@ANSWER_MODES.register("answer_line")
def extract_answer_line(text: str) -> str | None:
    """DAPO format: the last ``Answer: ...`` (regex ``(?i)Answer\\s*:\\s*([^\\n]+)``), or None.

    A box inside the line is unwrapped; a trailing period and surrounding ``$`` are stripped.
    """
    if not isinstance(text, str):
        return None
    last = None
    for last in _ANSWER_LINE_RE.finditer(text):
        pass
    if last is None:
        return None
    ans = last.group(1).strip()
    if _last_box_start(ans) is not None:
        boxed = extract_boxed(ans)
        if boxed is not None:
            ans = boxed
    ans = ans.strip().rstrip(" .")
    if len(ans) >= 2 and ans.startswith("$") and ans.endswith("$"):
        ans = ans.strip("$").strip()
    return ans or None


@ANSWER_MODES.register("boxed_or_answer_line")
def _boxed_or_answer_line(text: str) -> str | None:
    """The last box if there is one, else the last answer line."""
    b = extract_boxed(text)
    return b if b is not None else extract_answer_line(text)


#: the built-in modes, in registration order (``ANSWER_MODES.names()`` also lists modes registered later)
MODES = ANSWER_MODES.names()


def check_mode(mode: str) -> str:
    """``mode`` if it is a registered answer mode, else ValueError naming it and the registered ones."""
    if not isinstance(mode, str) or mode not in ANSWER_MODES:
        raise ValueError(f"unknown extraction mode {mode!r}; expected one of {ANSWER_MODES.names()}")
    return mode


def extract_answer(text: str, mode: str = "boxed") -> str | None:
    """Final answer of a response in a registered answer mode (``ANSWER_MODES``; built in: ``MODES``)."""
    return ANSWER_MODES[check_mode(mode)].fn(text)
