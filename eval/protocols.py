"""Named evaluation protocols: sampling settings and sample counts per benchmark (recorded in every output).

* ``paper`` (ARMOR.md §6, and the authors' code for what the paper leaves open): temperature 1.0, top_p 0.7.
  AIME24 / AIME25 / AMC (``amc23``, the paper protocol's AMC column; ``amc``, AI-MO's 83, beside it): avg@32
  and pass@16 from 32 samples. GPQA-Diamond / MMLU-Pro (``mmlu_pro``, ``mmlu_pro_sample300``): avg@8.
  MATH-500 / Minerva / OlympiadBench and any other benchmark: avg@4 (k is configurable with ``samples``).
  Math benchmarks are prompted with the DAPO prompt the authors train and validate with (``math_template``)
  and graded from the same samples by two scorers (``scorers``): ``math_dapo`` (the authors', the primary
  columns ``avg@32`` ...) and ``math_verify`` beside it (``avg@32/math_verify`` ...); pass@j is reported by
  both estimators, the unbiased one (``pass@16``) and verl's bootstrap (``best@16``). Multiple-choice
  benchmarks keep their own template and letter grading (the authors' code has no protocol for them). The
  response budget is not part of the protocol: it is the model preset's ``lengths.max_response``.
* ``greedy``: temperature 0 (argmax), one sample, avg@1.
* ``toy``: the tiny world's validation sampling: temperature 1.0, top_p 0.7, 4 samples (avg@4, pass@4),
  48 new tokens, the ``plain`` prompt template.

Every protocol also reports maj@k (majority vote over the k extracted answers).
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DEFAULT_MAX_NEW_TOKENS", "BenchSetting", "Protocol", "PROTOCOLS", "get_protocol",
           "resolve_setting", "list_protocols"]

#: response budget when neither a flag, a preset, the protocol nor the run's config gives one
DEFAULT_MAX_NEW_TOKENS = 8192


@dataclass(frozen=True)
class BenchSetting:
    """samples: k samples per problem (avg@k, maj@k); pass_ks: the j of the reported pass@j (each <= k)."""
    samples: int
    pass_ks: tuple[int, ...] = ()


@dataclass(frozen=True)
class Protocol:
    name: str
    description: str
    temperature: float
    top_p: float
    default: BenchSetting
    per_benchmark: dict = field(default_factory=dict)   # benchmark (registry or report name) -> BenchSetting
    max_new_tokens: int | None = None                   # None: from the preset / run config / default
    template: str | None = None                         # None: the benchmark's default template
    math_template: str | None = None                    # math benchmarks' template when template is None
    scorers: tuple[str, ...] = ("math_verify",)         # math verdicts: the primary first, the rest beside
    best_of: bool = False                               # also verl's bootstrap best@j beside each pass@j

    def setting(self, benchmark: str) -> BenchSetting:
        return self.per_benchmark.get(benchmark, self.default)

    def to_dict(self) -> dict:
        return {"name": self.name, "temperature": self.temperature, "top_p": self.top_p,
                "max_new_tokens": self.max_new_tokens, "template": self.template,
                "math_template": self.math_template, "scorers": list(self.scorers), "best_of": self.best_of}


_MATH32 = BenchSetting(32, (16,))
_GENERAL8 = BenchSetting(8, ())

PROTOCOLS: dict[str, Protocol] = {
    "paper": Protocol(
        "paper",
        "ARMOR.md §6: AIME/AMC avg@32 + pass@16, GPQA/MMLU-Pro avg@8, others avg@4; T=1.0, top_p=0.7; "
        "math: the DAPO prompt, math_dapo (primary) and math_verify verdicts, pass@j unbiased and best@j",
        temperature=1.0, top_p=0.7, default=BenchSetting(4, ()), math_template="dapo",
        scorers=("math_dapo", "math_verify"), best_of=True,
        per_benchmark={"aime24": _MATH32, "aime25": _MATH32, "amc": _MATH32, "amc23": _MATH32,
                       "amc_aimo83": _MATH32, "gpqa_diamond": _GENERAL8, "gpqa": _GENERAL8,
                       "mmlu_pro": _GENERAL8, "mmlu_pro_sample300": _GENERAL8}),
    "greedy": Protocol("greedy", "temperature 0 (argmax), one sample", temperature=0.0, top_p=1.0,
                       default=BenchSetting(1, ())),
    "toy": Protocol("toy",
                    "tiny world validation sampling: T=1.0, top_p=0.7, 4 samples, 48 tokens, plain template",
                    temperature=1.0, top_p=0.7, default=BenchSetting(4, (4,)), max_new_tokens=48,
                    template="plain"),
}


def list_protocols() -> list[str]:
    return sorted(PROTOCOLS)


def get_protocol(name: str) -> Protocol:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ValueError(f"unknown protocol {name!r}; known: {', '.join(list_protocols())}") from None


def _check_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    return v


def resolve_setting(protocol: Protocol, benchmark: str, samples: int | None = None,
                    pass_ks: tuple[int, ...] | list[int] | None = None,
                    aliases: tuple[str, ...] = ()) -> BenchSetting:
    """The (k, pass ks) of ``benchmark`` under ``protocol``, with ``samples`` / ``pass_ks`` overrides.

    ValueError (naming the benchmark) when k < 1 or a pass@j has j < 1 or j > k."""
    base = protocol.default
    for name in (benchmark, *aliases):
        if name in protocol.per_benchmark:
            base = protocol.per_benchmark[name]
            break
    k = base.samples if samples is None else _check_int("samples", samples)
    if k < 1:
        raise ValueError(f"{benchmark}: samples (k) must be >= 1, got {k}")
    ks = tuple(base.pass_ks if pass_ks is None else pass_ks)
    for j in ks:
        _check_int("pass@k", j)
        if j < 1:
            raise ValueError(f"{benchmark}: pass@{j}: k must be >= 1")
        if j > k:
            raise ValueError(f"{benchmark}: pass@{j} needs at least {j} samples per problem but the "
                             f"{protocol.name} protocol draws {k} (raise --samples or set --pass-k)")
    return BenchSetting(k, tuple(sorted(set(ks))))
