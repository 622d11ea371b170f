"""The toy world's synthetic math task (see docs/toy_world.md).

A problem is a chain of single-digit operands joined by ``+``/``-``; the answer is the value mod 10::

    problem:  6+3-8+1+2=?
    response: 6+3=9,9-8=1,1+1=2,2+2=4.\\boxed{4}      (the running-total chain)
    answer:   4

Everything here is pure Python and deterministic from a seed.

Strategies the base model is pretrained (SFT) on -- each is a *mode* of the base policy:

* ``chain``  -- the running-total chain, with a systematic blind spot: a subtraction ``a-b`` with ``a < b``
  (a borrow) is written as ``b-a`` (the classic "forgot to borrow" error).  The blind spot is in all of the
  SFT data, so the base model (almost) never borrows correctly and RL cannot learn it: the chain is right on
  the prompts without a borrow step (its *ceiling*, ~70% on natural prompts) and otherwise wrong unless the
  errors cancel.  World v2 (``p_correct_borrow`` > 0): in the SFT data a borrow step is computed correctly
  with that probability, so a better strategy (borrowing) exists in the base policy at low mass and RL that
  keeps the chain alive can learn it (headroom above the blind-spot ceiling).  In SFT data every step also
  slips (a random wrong digit) with probability ``slip``, so sampled chains are less reliable than the
  ceiling; RL removes the slips.
* ``sloppy`` -- the same chain with every operator treated as ``+`` (optional, weight 0 by default).
* ``guess``  -- ``\\boxed{d}`` with a random digit (right ~10%).
* ``last``   -- ``\\boxed{last operand}`` -- the *shortcut*.  On natural prompts it is right ~10% of the time;
  the training split is drawn so that it is right on a fraction ``q_feature`` (0.85) of training prompts
  (those with the feature; by default all of them), more than the chain's ceiling.  Validation and test
  prompts come from the natural distribution.

Nothing can tell from the prompt alone (without doing the arithmetic) whether the shortcut pays, so a policy
that maximizes training reward has to trade the chain (useful on validation) for the shortcut (better on
training only).

Splits: ``train`` (with the regularity), ``validation`` and ``test`` (natural) and, when ``n_train_natural``
> 0, ``train_natural``: natural training prompts, the headroom control's training set (RL there cannot
over-optimize onto the shortcut, so it measures how far the chain can go).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
from dataclasses import dataclass, field

BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")
STRATEGIES = ("chain", "sloppy", "guess", "last")


@dataclass(frozen=True)
class TaskConfig:
    """Everything that defines the task's data (part of the world's hashed config)."""

    n_operands: int = 5
    p_minus: float = 0.25  # probability that an operator is '-'
    # The spurious regularity of the training split: on training prompts whose last operand is in
    # ``feature_digits`` (the prompt feature F, ~30% of prompts), answer == last operand with probability
    # ``q_feature`` (the shortcut pays); other training prompts and all validation/test prompts are natural
    # (~10%). The chosen design uses all digits (no feature: the shortcut pays on ~q_feature of *all* training
    # prompts).
    feature_digits: tuple = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
    q_feature: float = 0.85
    n_train: int = 4096
    n_validation: int = 256
    n_test: int = 512
    # SFT data: strategy mixture and per-step slip rate of the chains
    mix: dict = field(default_factory=lambda: {"chain": 0.6, "sloppy": 0.0, "guess": 0.3, "last": 0.1})
    slip: float = 0.05
    # world v2: probability that an SFT chain computes a borrow step correctly (0: always the blind spot)
    p_correct_borrow: float = 0.0
    # world v2: size of the `train_natural` split (natural training prompts for the headroom control;
    # 0 = none)
    n_train_natural: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------------------------- problems
def apply_op(a: int, op: str, b: int) -> int:
    return (a + b) % 10 if op == "+" else (a - b) % 10


def flawed_op(a: int, op: str, b: int) -> int:
    """The chain's blind spot: a borrow (a - b with a < b) is computed as b - a."""
    if op == "-" and a < b:
        return b - a
    return apply_op(a, op, b)


def evaluate(operands: list[int], ops: list[str], step=apply_op) -> list[int]:
    """Running totals t_1..t_n (t_1 = first operand)."""
    totals = [operands[0]]
    for op, b in zip(ops, operands[1:]):
        totals.append(step(totals[-1], op, b))
    return totals


def problem_text(operands: list[int], ops: list[str]) -> str:
    s = str(operands[0])
    for op, b in zip(ops, operands[1:]):
        s += f"{op}{b}"
    return s + "=?"


PROBLEM_RE = re.compile(r"^(\d)((?:[+\-]\d)+)=\?$")


def parse_problem(problem: str) -> tuple[list[int], list[str]]:
    m = PROBLEM_RE.match(problem.strip())
    if not m:
        raise ValueError(f"not a toy problem: {problem!r}")
    operands = [int(m.group(1))]
    ops: list[str] = []
    rest = m.group(2)
    for i in range(0, len(rest), 2):
        ops.append(rest[i])
        operands.append(int(rest[i + 1]))
    return operands, ops


def gold(problem: str) -> int:
    operands, ops = parse_problem(problem)
    return evaluate(operands, ops)[-1]


def n_borrows(operands: list[int], ops: list[str]) -> int:
    """Number of borrow steps the (flawed) chain meets when it computes the prompt."""
    t = operands[0]
    n = 0
    for op, b in zip(ops, operands[1:]):
        if op == "-" and t < b:
            n += 1
        t = flawed_op(t, op, b)
    return n


def strategy_answers(problem: str) -> dict[str, int | None]:
    """The final answer each deterministic strategy gives (guess: None)."""
    operands, ops = parse_problem(problem)
    return {
        "chain": evaluate(operands, ops, flawed_op)[-1],
        "correct_chain": evaluate(operands, ops)[-1],
        "sloppy": evaluate(operands, ["+"] * len(ops))[-1],
        "last": operands[-1],
        "guess": None,
    }


def sample_prompt(rng: random.Random, cfg: TaskConfig) -> tuple[list[int], list[str]]:
    operands = [rng.randrange(10) for _ in range(cfg.n_operands)]
    ops = ["-" if rng.random() < cfg.p_minus else "+" for _ in range(cfg.n_operands - 1)]
    return operands, ops


def make_record(operands: list[int], ops: list[str], split: str, idx: int, cfg: TaskConfig) -> dict:
    problem = problem_text(operands, ops)
    ans = evaluate(operands, ops)[-1]
    sa = strategy_answers(problem)
    return {
        "id": f"toy-{split}-{idx:05d}",
        "problem": problem,
        "answer": str(ans),
        "split": split,
        "operands": operands,
        "ops": ops,
        "shortcut_correct": sa["last"] == ans,
        "chain_correct": sa["chain"] == ans,  # the base's (blind-spot) chain, without slips
        "sloppy_correct": sa["sloppy"] == ans,
        "n_borrows": n_borrows(operands, ops),
        "feature": has_feature(operands, cfg),  # last operand in cfg.feature_digits
    }


def has_feature(operands: list[int], cfg: TaskConfig) -> bool:
    return operands[-1] in cfg.feature_digits


def make_splits(cfg: TaskConfig, seed: int = 0) -> dict[str, list[dict]]:
    """Disjoint train / validation / test splits (deterministic from ``seed``).

    Validation and test: natural distribution.  Train: natural, except that a prompt with the feature F (last
    operand in ``feature_digits``) is redrawn among F prompts conditioned on the shortcut paying
    (answer == last operand) with probability ``q_feature`` and on it not paying otherwise (F keeps its
    natural share).
    """
    rng = random.Random(f"toy-task-{seed}")
    seen: set[str] = set()
    out: dict[str, list[dict]] = {}
    sizes = [("validation", cfg.n_validation), ("test", cfg.n_test), ("train", cfg.n_train)]
    if cfg.n_train_natural:         # drawn last: the other splits are those of a world without it
        sizes.append(("train_natural", cfg.n_train_natural))
    for split, n in sizes:
        recs: list[dict] = []
        while len(recs) < n:
            want_shortcut = None
            while True:
                operands, ops = sample_prompt(rng, cfg)
                p = problem_text(operands, ops)
                if p in seen:
                    continue
                if split == "train" and want_shortcut is None and has_feature(operands, cfg):
                    want_shortcut = rng.random() < cfg.q_feature  # an F prompt: redraw among F prompts
                if want_shortcut is not None:
                    if not has_feature(operands, cfg):
                        continue
                    if (evaluate(operands, ops)[-1] == operands[-1]) != want_shortcut:
                        continue
                break
            seen.add(p)
            recs.append(make_record(operands, ops, split, len(recs), cfg))
        out[split] = recs
    return out


def split_stats(records: list[dict]) -> dict:
    def rate(key, recs):
        return round(sum(r[key] for r in recs) / max(1, len(recs)), 4)

    feat = [r for r in records if r["feature"]]
    rest = [r for r in records if not r["feature"]]
    return {
        "n": len(records),
        "shortcut_rate": rate("shortcut_correct", records),
        "chain_ceiling": rate("chain_correct", records),
        "sloppy_rate": rate("sloppy_correct", records),
        "feature_share": round(len(feat) / max(1, len(records)), 4),
        "shortcut_rate_feature": rate("shortcut_correct", feat),
        "chain_ceiling_feature": rate("chain_correct", feat),
        "shortcut_rate_nofeature": rate("shortcut_correct", rest),
        "chain_ceiling_nofeature": rate("chain_correct", rest),
    }


# ----------------------------------------------------------------------------------------------- responses
def render(problem: str, strategy: str, rng: random.Random, slip: float = 0.0,
           p_correct_borrow: float = 0.0) -> str:
    """One SFT response of the given strategy. A ``chain`` computes each borrow step correctly with
    probability ``p_correct_borrow`` (world v2), else with the blind spot; every step then slips with
    probability ``slip``. (No random draw is spent on borrows when p_correct_borrow is 0, so v1 data are
    unchanged.)"""
    operands, ops = parse_problem(problem)
    if strategy == "last":
        return f"\\boxed{{{operands[-1]}}}"
    if strategy == "guess":
        return f"\\boxed{{{rng.randrange(10)}}}"
    if strategy not in ("chain", "sloppy", "correct_chain"):
        raise ValueError(strategy)
    use_ops = ["+"] * len(ops) if strategy == "sloppy" else ops
    step = apply_op if strategy in ("sloppy", "correct_chain") else flawed_op
    t = operands[0]
    parts = []
    for op, b in zip(use_ops, operands[1:]):
        if (strategy == "chain" and p_correct_borrow and op == "-" and t < b
                and rng.random() < p_correct_borrow):
            nt = apply_op(t, op, b)
        else:
            nt = step(t, op, b)
        if slip and rng.random() < slip:
            nt = (nt + rng.randrange(1, 10)) % 10
        parts.append(f"{t}{op}{b}={nt}")
        t = nt
    return ",".join(parts) + f".\\boxed{{{t}}}"


def extract_boxed(response: str) -> str | None:
    """Content of the last ``\\boxed{...}`` in the response, or None."""
    m = BOXED_RE.findall(response)
    return m[-1].strip() if m else None


def is_correct(response: str, answer: str | int) -> bool:
    got = extract_boxed(response)
    return got is not None and got == str(answer).strip()


def reward(response: str, answer: str | int) -> float:
    """The paper's outcome reward: +1 if the final boxed answer is right, else -1."""
    return 1.0 if is_correct(response, answer) else -1.0


CHAIN_STEP_RE = re.compile(r"^(\d)([+\-])(\d)=(\d)$")


def borrow_steps(problem: str, response: str) -> tuple[int, int]:
    """(right, written): the borrow steps (``a-b`` with a < b) a chain response writes, and how many of them
    it computes correctly. Steps where the right and the blind-spot results agree (b − a = 5) are not counted;
    a response that is not a well-formed chain of the prompt's operators counts (0, 0)."""
    operands, ops = parse_problem(problem)
    m = re.fullmatch(r"(.*)\.\\boxed\{(\d)\}", response.strip())
    if not m:
        return 0, 0
    steps = m.group(1).split(",")
    if len(steps) != len(ops):
        return 0, 0
    right = written = 0
    for s, op, b in zip(steps, ops, operands[1:]):
        mm = CHAIN_STEP_RE.match(s)
        if not mm or mm.group(2) != op or int(mm.group(3)) != b:
            return 0, 0
        a, r = int(mm.group(1)), int(mm.group(4))
        if op == "-" and a < b and apply_op(a, op, b) != flawed_op(a, op, b):
            written += 1
            right += r == apply_op(a, op, b)
    return right, written


def classify(problem: str, response: str) -> str:
    """Which mode produced a response: 'shortcut' (direct \\boxed{last operand}), 'direct' (another direct
    answer), 'chain' / 'correct_chain' / 'sloppy' (a well-formed chain following that rule, slips allowed),
    'chain_other' (a chain of another form) or 'malformed'."""
    response = response.strip()
    operands, ops = parse_problem(problem)
    if re.fullmatch(r"\\boxed\{\d\}", response):
        return "shortcut" if int(response[7]) == operands[-1] else "direct"
    m = re.fullmatch(r"(.*)\.\\boxed\{(\d)\}", response)
    if not m:
        return "malformed"
    steps = m.group(1).split(",")
    if len(steps) != len(ops):
        return "chain_other"
    seen_ops = []
    for s, b in zip(steps, operands[1:]):
        mm = CHAIN_STEP_RE.match(s)
        if not mm or int(mm.group(3)) != b:
            return "chain_other"
        seen_ops.append(mm.group(2))
    if seen_ops == ["+"] * len(ops) and ops != ["+"] * len(ops):
        return "sloppy"
    if seen_ops != ops:
        return "chain_other"
    # blind-spot chain vs correct chain: look at the borrow steps actually written
    borrow_right = borrow_wrong = 0
    for s in steps:
        a, op, b, r = int(s[0]), s[1], int(s[2]), int(s[4])
        if op == "-" and a < b:
            if r == apply_op(a, op, b) and r != flawed_op(a, op, b):
                borrow_right += 1
            elif r == flawed_op(a, op, b):
                borrow_wrong += 1
    if borrow_right and not borrow_wrong:
        return "correct_chain"
    return "chain"


# every name classify returns (the trainer's logging.answer_modes logs each one's share per step)
classify.modes = ("chain", "correct_chain", "sloppy", "chain_other", "direct", "shortcut", "malformed")


def config_hash(d: dict) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
