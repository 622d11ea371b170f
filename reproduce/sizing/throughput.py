"""What a GPU does per second, the assumption every hour of a plan rests on: `Throughput` (assumed defaults <
the preset's protocol keys < a `bench.gpu_check` report < the driver's flags), its low / expected / high range
(`scenarios`), or the pilot's measurement (`Measured`, read from runs/<preset>/pilot/pilot.json)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from common.jsonl import read_json

PEAK_TFLOPS = 989.0             # H100/H200 dense bf16, the MFU reference (bench/gpu_check.py's default)
DEFAULT_ROLLOUT_TPS = 2500.0    # generated tokens/s per GPU (vLLM, colocated, 7-8B, bf16): assumed
DEFAULT_UPDATE_MFU = 0.30       # model FLOPs utilisation of the update: assumed
DEFAULT_SAVE_S = 300.0          # seconds per checkpoint save: assumed
# one sequence decoded alone (the tail of a generation call), 7-8B bf16 on an H100-class GPU: assumed range
DECODE_TPS = {"low": 150.0, "expected": 100.0, "high": 60.0}
# seconds to push the weights into the engine (a full-tensor gather + load_weights): assumed range
PUSH_S = {"low": 5.0, "expected": 10.0, "high": 30.0}
# mean response / max_response without a paper length for the model: assumed range
ASSUMED_FILL = {"low": 0.1, "expected": 0.25, "high": 0.5}
# the high end of a paper-length fill: lengths may grow in stage 2 (an allowance, no source)
PAPER_FILL_HIGH_FACTOR = 2.0
# after a GPU pilot, the high end's growth of the mean response over training beyond the pilot's (its first
# DAPO steps) where the paper reports no length for the model: assumed
PILOT_GROWTH_ASSUMED = 2.0
# armor.trainer.ANCHOR_CHUNK_MARGIN (pinned by tests/unit/test_sizing.py; the trainer's module imports torch):
# the reference samples ~1.5 x the prompts still needed
ANCHOR_CHUNK_MARGIN = 1.5
PILOT_DIR, PILOT_FILE = "pilot", "pilot.json"   # runs/<preset>/pilot/pilot.json: what the pilot measured
DEFAULTS_SOURCE = "reproduce/sizing/throughput.py defaults"


class SizingError(ValueError):
    """A plan input (flag, protocol key, report, pilot file) that cannot size a plan: the message names it."""



@dataclass
class Measured:
    """What the pilot measured (runs/<preset>/pilot/pilot.json, written by reproduce/jobs/pilot.py): seconds
    of a DAPO step and of an ARMOR step at full-scale per-GPU load, of a save, a push, a validation sample
    and an evaluation sample (the slice: one chunk a benchmark, so one rank's), and the lengths they ran
    at."""
    path: str
    dapo_step_s: float
    armor_step_s: float
    reference_logprob_s: float      # an ARMOR step's log-prob phase minus DAPO's: πref's forward
    save_s: float
    push_s: float
    validation_sample_s: float      # seconds per validation sample, on the pilot's ranks
    eval_sample_s: Optional[float]  # seconds per evaluation sample of one rank (the slice's chunks)
    response_tokens: float          # the pilot's mean response length
    anchor_share: Optional[float]
    nodes: int
    gpus: int
    when: str = ""
    # the DAPO phase computed πref's log-probs (the preset's KL monitor): its step holds πref's forward
    dapo_reads_reference: bool = False

    def describe(self) -> str:
        ev = f", evaluation {self.eval_sample_s:.3g} s a sample" if self.eval_sample_s else ""
        share = f", anchor share {self.anchor_share:.2f}" if self.anchor_share is not None else ""
        return (f"measured by the pilot ({self.path}{', ' + self.when if self.when else ''}; {self.nodes} "
                f"node(s), {self.gpus} GPU(s), at the paper's per-GPU load): DAPO step "
                f"{self.dapo_step_s:,.1f} s, ARMOR step {self.armor_step_s:,.1f} s, save "
                f"{self.save_s:,.1f} s, "
                f"push {self.push_s:,.2f} s, validation {self.validation_sample_s:.3g} s a sample{ev}; "
                f"responses {self.response_tokens:,.0f} tokens on average{share}")


def read_pilot(path: str | Path) -> Optional[Measured]:
    """The pilot's measurements, or None when there are none (no file, or a pilot that did not finish)."""
    d = read_json(Path(path))
    if not isinstance(d, dict) or not d.get("complete"):
        return None
    try:
        return Measured(path=str(path), dapo_step_s=float(d["dapo"]["step_s"]),
                        armor_step_s=float(d["armor"]["step_s"]),
                        reference_logprob_s=max(0.0, float(d["armor"]["logprob_s"])
                                                - float(d["dapo"]["logprob_s"])),
                        save_s=float(d["save_s"]), push_s=float(d["push_s"]),
                        validation_sample_s=float(d["validation_sample_s"]),
                        eval_sample_s=(float(d["eval"]["sample_s"]) if (d.get("eval") or {}).get("sample_s")
                                       else None),
                        response_tokens=float(d["dapo"]["response_tokens"]),
                        anchor_share=d["armor"].get("anchor_share"), nodes=int(d["nodes"]),
                        gpus=int(d["gpus"]), when=str(d.get("when", "")),
                        dapo_reads_reference=bool(d["dapo"].get("reference_logprobs", False)))
    except (KeyError, TypeError, ValueError) as e:
        raise SizingError(f"{path}: not a complete pilot report ({e!r}); rerun --pilot") from None



@dataclass
class Throughput:
    """The assumption every hour in a plan rests on (named in its output)."""
    rollout_tokens_per_s: float = DEFAULT_ROLLOUT_TPS
    update_tokens_per_s: Optional[float] = None     # None: from update_mfu and the model's FLOPs per token
    update_mfu: float = DEFAULT_UPDATE_MFU
    fill: float = ASSUMED_FILL["expected"]
    save_s: float = DEFAULT_SAVE_S
    decode_tokens_per_s: float = DECODE_TPS["expected"]
    push_s: float = PUSH_S["expected"]
    anchor_share: Optional[float] = None            # None: the lazy anchors' 1.5 B / drawn prompts
    source: str = f"assumed ({DEFAULTS_SOURCE}), not measured"
    fill_source: str = "assumed"
    label: str = "expected"
    fixed: frozenset = frozenset()                  # knobs a flag, key or report set (not ranged)
    measured: Optional[Measured] = None

    def update_tps(self, n_params: Optional[int]) -> float:
        """U: trained tokens/s per GPU; from the MFU at 8 N FLOPs per token (forward 2N, backward 4N,
        recomputation 2N) when no figure is given."""
        if self.update_tokens_per_s:
            return self.update_tokens_per_s
        return self.update_mfu * PEAK_TFLOPS * 1e12 / (8 * (n_params or 7e9))

    def share(self, cfg) -> float:
        """The anchor share: the fraction of a round's drawn prompts whose reference samples are drawn."""
        if self.anchor_share is not None:
            return self.anchor_share
        b = cfg.batch.prompts_per_step
        drawn = cfg.rollout.gen_batch_prompts or b
        margin = 1.0 if self.label == "low" else ANCHOR_CHUNK_MARGIN   # low: every reference call keeps
        return min(1.0, margin * b / drawn)

    def describe(self, n_params: Optional[int]) -> str:
        if self.measured is not None:
            return "throughput: " + self.measured.describe()
        u = (f"update {self.update_tps(n_params):,.0f} trained tok/s/GPU" if self.update_tokens_per_s else
             f"update {self.update_tps(n_params):,.0f} trained tok/s/GPU (MFU {self.update_mfu:g} of "
             f"{PEAK_TFLOPS:g} TFLOP/s at 8·N FLOPs/token)")
        share = ("lazy anchors' 1.5 B of the drawn prompts" if self.anchor_share is None
                 else f"{self.anchor_share:g} of the drawn prompts")
        return (f"throughput ({self.label}): rollout {self.rollout_tokens_per_s:,.0f} generated tok/s/GPU, "
                f"{u}, responses {self.fill:.3g} of max_response on average ({self.fill_source}), a call's "
                f"tail decoded alone at {self.decode_tokens_per_s:g} tok/s, {self.push_s:g} s a push, "
                f"reference samples for the {share}, {self.save_s:g} s per save [{self.source}]")


def fill_range(preset) -> tuple[dict[str, float], str]:
    """{low, expected, high} response fill of the preset's model and where it comes from: the paper's
    reported lengths (protocol.paper_response_tokens over lengths.max_response: the longer one expected, the
    high end PAPER_FILL_HIGH_FACTOR x it), else ASSUMED_FILL."""
    p, L = preset.protocol, preset.cfg.lengths.max_response
    if p.paper_response_tokens:
        lo, hi = (float(x) / L for x in p.paper_response_tokens)
        src = (f"the paper's {p.paper_response_tokens[0]:g}-{p.paper_response_tokens[1]:g} tokens of "
               f"{L} ({p.paper_response_source or 'protocol.paper_response_tokens'}); high: "
               f"{PAPER_FILL_HIGH_FACTOR:g} x, an allowance")
        return {"low": lo, "expected": hi, "high": min(1.0, PAPER_FILL_HIGH_FACTOR * hi)}, src
    return dict(ASSUMED_FILL), "assumed: the paper reports no length for this model"


def throughput(preset, rollout_tps: Optional[float] = None, update_tps: Optional[float] = None,
               fill: Optional[float] = None, save_s: Optional[float] = None,
               gpu_check: Optional[str | Path] = None, decode_tps: Optional[float] = None,
               push_s: Optional[float] = None, anchor_share: Optional[float] = None,
               pilot: Optional[Measured] = None) -> Throughput:
    """The plan's expected throughput: defaults < the preset's protocol keys < a bench.gpu_check report <
    flags; a pilot's measurement replaces the step, save, push and evaluation figures."""
    p = preset.protocol
    fills, fill_src = fill_range(preset)
    t = Throughput(fill=fills["expected"], fill_source=fill_src)
    src, fixed = [], set()
    for name, attr in (("rollout_tokens_per_s", "rollout_tokens_per_s"),
                       ("update_tokens_per_s", "update_tokens_per_s"), ("response_fill", "fill"),
                       ("save_s", "save_s")):
        v = getattr(p, name, None)
        if v is not None:
            setattr(t, attr, float(v))
            src.append(f"protocol.{name}")
            fixed.add(attr)
    if gpu_check:
        got = from_gpu_check(gpu_check, model_params(preset))
        for k, v in got.items():
            setattr(t, k, v)
        fixed |= set(got)
        src.append(f"{gpu_check}: {', '.join(got) or 'no usable figure'}")
    for attr, v, flag in (("rollout_tokens_per_s", rollout_tps, "--rollout-tokens-per-s"),
                          ("update_tokens_per_s", update_tps, "--update-tokens-per-s"),
                          ("fill", fill, "--response-fill"), ("save_s", save_s, "--save-s"),
                          ("decode_tokens_per_s", decode_tps, "--decode-tokens-per-s"),
                          ("push_s", push_s, "--push-s"), ("anchor_share", anchor_share, "--anchor-share")):
        if v is not None:
            setattr(t, attr, float(v))
            src.append(flag)
            fixed.add(attr)
    if "fill" in fixed:
        t.fill_source = "given"
    for attr, ok, why in (("rollout_tokens_per_s", t.rollout_tokens_per_s > 0, "must be > 0"),
                          ("save_s", t.save_s >= 0, "must be >= 0"),
                          ("update_tokens_per_s", t.update_tokens_per_s is None or t.update_tokens_per_s > 0,
                           "must be > 0"),
                          ("response_fill", 0 < t.fill <= 1, "must be in (0, 1]"),
                          ("decode_tokens_per_s", t.decode_tokens_per_s > 0, "must be > 0"),
                          ("push_s", t.push_s >= 0, "must be >= 0"),
                          ("anchor_share", t.anchor_share is None or 0 < t.anchor_share <= 1,
                           "must be in (0, 1]")):
        if not ok:
            value = getattr(t, "fill" if attr == "response_fill" else attr)
            raise SizingError(f"throughput {attr}: {value!r} {why}")
    if src:
        t.source = "from " + "; ".join(src) + f"; the rest assumed ({DEFAULTS_SOURCE})"
    t.fixed = frozenset(fixed)
    if pilot is not None:
        t.measured = pilot
        t.source = pilot.describe()
        t.label = "measured"
        if "fill" not in fixed:         # the pilot's mean response: what a call's tail is priced from
            t.fill = min(1.0, max(pilot.response_tokens, 1.0) / preset.cfg.lengths.max_response)
            t.fill_source = "the pilot's"
    return t


def pilot_growth(preset, m: Measured) -> tuple[float, str]:
    """How much longer than the pilot's (its first DAPO steps, from the base model) the mean response of a
    long run gets at the high end, and where that comes from: the paper's longer reported length
    (protocol.paper_response_tokens, Fig. 1 at 7B) over the pilot's mean, or PILOT_GROWTH_ASSUMED."""
    p = preset.protocol
    if p.paper_response_tokens:
        late = float(max(p.paper_response_tokens))
        return (max(1.0, late / max(m.response_tokens, 1.0)),
                f"the paper's {late:g} tokens ({p.paper_response_source or 'protocol.paper_response_tokens'})"
                f" over the pilot's {m.response_tokens:,.0f}")
    return PILOT_GROWTH_ASSUMED, (f"assumed {PILOT_GROWTH_ASSUMED:g} x the pilot's {m.response_tokens:,.0f} "
                                  f"tokens: the paper reports no length for this model")


def scenarios(preset, t: Throughput) -> list[Throughput]:
    """[low, expected, high]: the assumption's range, each knob no flag, key or report fixed at its low /
    high end (fill, the tail's decode speed, the push, the anchor share). After a GPU pilot: [measured,
    high]: the pilot's seconds, and the same with responses grown (`pilot_growth`: its step, validation and
    evaluation seconds x the growth, tails at the slow end); [t] after a CPU preset's pilot."""
    if t.measured is not None:
        m = t.measured
        if not m.gpus:
            return [t]
        g, why = pilot_growth(preset, m)
        grown = dataclasses.replace(m, dapo_step_s=m.dapo_step_s * g, armor_step_s=m.armor_step_s * g,
                                    reference_logprob_s=m.reference_logprob_s * g,
                                    validation_sample_s=m.validation_sample_s * g,
                                    eval_sample_s=m.eval_sample_s * g if m.eval_sample_s else None,
                                    response_tokens=m.response_tokens * g)
        high = dataclasses.replace(t, label="high", measured=grown, fill=min(1.0, t.fill * g),
                                   decode_tokens_per_s=DECODE_TPS["high"], fill_source=why,
                                   source=f"the pilot's, responses {g:.2f} x longer ({why})")
        return [t, high]
    fills, _ = fill_range(preset)
    out = []
    for label in ("low", "expected", "high"):
        if label == "expected":
            out.append(t)
            continue
        ch = {"label": label}
        if "fill" not in t.fixed:
            ch["fill"] = fills[label]
        if "decode_tokens_per_s" not in t.fixed:
            ch["decode_tokens_per_s"] = DECODE_TPS[label]
        if "push_s" not in t.fixed:
            ch["push_s"] = PUSH_S[label]
        if "anchor_share" not in t.fixed:
            ch["anchor_share"] = None if label == "low" else 1.0
        out.append(dataclasses.replace(t, **ch))
    return out


def from_gpu_check(path: str | Path, n_params: Optional[int]) -> dict:
    """The figures of a `python -m bench.gpu_check` report that transfer to the full model: the update's MFU
    (its TFLOP/s over the 989 TFLOP/s reference) and the engine's generated tokens/s scaled by the checked
    model's parameters over the preset's (decoding is bound by reading the weights)."""
    rep = read_json(Path(path))
    if not isinstance(rep, dict):
        raise SizingError(f"--gpu-check {path}: not a gpu_check.json report")
    out = {}
    upd = (rep.get("phases") or {}).get("update") or {}
    if upd.get("mfu"):
        out["update_mfu"] = float(upd["mfu"])
    gen = (rep.get("vllm") or {}).get("vllm_generate_tokens_per_s")
    checked = (rep.get("model") or {}).get("params")
    if gen and checked and n_params:
        out["rollout_tokens_per_s"] = float(gen) * float(checked) / float(n_params)
    return out


def model_params(preset) -> Optional[int]:
    """Parameters of the preset's model (armor.memory's shape of it), None when its shape is unknown."""
    from armor import memory
    shape = memory.model_shape(preset.cfg.model.path)
    return shape.params if shape else None
