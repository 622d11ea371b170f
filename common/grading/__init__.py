"""Answer extraction and grading: benchmark scoring and the RL outcome reward (the public API of the package).

Protocol (recorded; changing it changes every number):

* Only the final answer counts. In ``mode="boxed"`` that is the content of the LAST ``\\boxed{...}``
  (or ``\\fbox{...}``) of the response; a correct number written anywhere else is ignored. math-verify is
  run on the extracted answer wrapped as ``$...$``, never on the raw response (its lenient fallback would
  accept an unboxed number anywhere in the text).
* ``mode="answer_line"`` is DAPO's format: the last match of ``(?i)Answer\\s*:\\s*([^\\n]+)`` (DAPO's regex;
  unlike DAPO we do not first cut the response to its last 300 characters, and we compare with math-verify
  where DAPO compares normalized strings -- the same verdicts for DAPO-Math-17k, whose answers are all
  integers). ``"boxed_or_answer_line"`` takes the last box if there is one, else the answer line. The modes
  are a registry (``ANSWER_MODES``): a new one is one registered extractor, and ``reward.answer_mode`` is
  validated against it.
* Math golds are parsed as ``$gold$`` and compared with ``math_verify.verify(gold, pred)``. Shortcuts decided
  in the parent without math-verify, with math-verify's verdict (see ``normalize._cheap_compare``; a test
  checks the agreement): both plain integers (``-?\\d+``) -> integer comparison (~1000x faster; RL on integer
  answers never reaches math-verify); identical up to ``\\left``/``\\right``, spacing and ``\\dfrac`` ->
  correct; ``x = <rhs>`` against a gold without ``=`` -> the rhs is compared; both plain numbers (integers,
  decimals, integer fractions) -> exact, or after rounding to 6 decimals when a decimal is involved.
* Multi-answer golds (OlympiadBench lists, or a ``list[str]`` gold) are joined with ``", "`` after removing
  ``$`` delimiters: math-verify parses ``a, b`` as the set {a, b}, so a prediction is correct iff it
  verifies against the whole set (order-free); giving only one of several answers is wrong.
* Multiple choice (``answer_type="mc"``): the letter A-J of the extracted answer (``\\text{}``, ``$``,
  parentheses stripped; ``"C"``, ``"(C)"``, ``"C. 42"``, ``"\\text{(C)}"`` all read as C) must equal the gold
  letter.
* Implausible answers are wrong with reason ``"implausible"`` (``Verdict.bound`` names the bound), decided in
  the parent before math-verify: extracted answers longer than ``max_answer_chars`` (default 1000), and,
  among those the shortcuts above do not decide, answers beyond a nesting, exponent, digit-run, numeric-power
  or factorial-operand bound that no gold of the shipped benchmarks comes near (``BOUNDS``, ``GOLD_MAXIMA``;
  a bound the gold itself exceeds is raised to the gold's measure). This is a linear-time string scan
  (``answer_shape``); towers of exponents, deep nesting and huge factorials would otherwise cost math-verify
  seconds or its whole timeout each.

Scorers (``SCORERS``, common.grading.scorers): everything above is the ``math_verify`` scorer (the default).
``math_dapo`` is the authors' reward and validation scorer (common.grading.math_dapo): the last ``Answer:``
line of the last 300 characters, Minerva's normalisation, string equality, +1 / -1, no boxed fallback.
``Grader(scorer=...)``, ``reward.scorer``, ``eval.grade --scorer`` and the evaluation protocols choose one.

Robustness: math-verify's own timeouts use SIGALRM, which only works in a main thread. ``Grader`` runs
math-verify in worker processes (fresh interpreters started with subprocess, talking over pipes, so
the caller's ``__main__`` is never re-imported and needs no guard). Each worker arms its own SIGALRM per item
(reason ``"timeout"``, worker survives) and the parent additionally kills a worker whose current item
exceeds ``timeout_s + kill_grace_s`` (e.g. stuck inside one C call), respawns it and marks that item
``"timeout"``. An answer that timed out once is remembered by the ``Grader`` (in the parent, for its
lifetime: ``TimeoutMemory``, keyed by the answer, not by (answer, gold), as the cost is in settling the
answer) and not graded again against any gold: reason ``"timeout_seen"``, counted wrong; answers that do not
time out get the verdicts they got before. Workers run under an address-space limit (``max_memory_mb``), so a
huge allocation becomes a ``MemoryError`` (reason ``"error"``) instead of swapping the machine. Grading never
raises on any response string; it raises ``ValueError`` only for caller bugs (length mismatch, unknown mode /
answer type, a gold that is not a string/number/list, a multiple-choice gold that is not a letter).

Throughput (``python -m bench.grading``): see the report in that module's output; integers are graded in
the parent at tens of thousands per second, LaTeX answers cost math-verify ~5-50 ms each (antlr parsing).

Modules, one job each: ``extract`` (the answer modes and their extractors), ``normalize`` (golds and the
comparisons that need no math-verify), ``shape`` (the plausibility bounds), ``choice`` (multiple-choice
letters), ``verify`` (the math-verify call under SIGALRM, ``TimeoutMemory``), ``math_dapo`` and ``scorers``
(the authors' scorer; the scorer registry), ``grade`` (``Verdict``, the
parent-side order of decisions, ``grade_one``), ``worker`` (the worker process), ``pool`` (``Grader`` and the
default graders).
"""
from __future__ import annotations

from common.grading.choice import mc_letter
from common.grading.extract import ANSWER_MODES, MODES, extract_answer, extract_answer_line, extract_boxed
from common.grading.grade import ANSWER_TYPES, REASONS, Verdict, grade_one
from common.grading.math_dapo import math_dapo_score, normalize_final_answer
from common.grading.normalize import normalize_gold
from common.grading.pool import Grader, close_default_graders, get_grader
from common.grading.scorers import DEFAULT_SCORER, SCORERS, check_scorer, dapo_verdict
from common.grading.shape import (BOUNDS, GOLD_MAXIMA, MAX_ANSWER_CHARS, AnswerShape, answer_shape,
                                  implausible_bound)
from common.grading.verify import TIMEOUT_SEEN, TimeoutMemory

__all__ = [
    "Verdict", "REASONS", "MODES", "ANSWER_MODES", "ANSWER_TYPES", "BOUNDS", "GOLD_MAXIMA",
    "MAX_ANSWER_CHARS", "AnswerShape", "answer_shape", "implausible_bound",
    "extract_boxed", "extract_answer_line", "extract_answer", "normalize_gold", "mc_letter",
    "grade_one", "Grader", "get_grader", "close_default_graders", "TimeoutMemory", "TIMEOUT_SEEN",
    "SCORERS", "DEFAULT_SCORER", "check_scorer", "dapo_verdict", "math_dapo_score", "normalize_final_answer",
]
