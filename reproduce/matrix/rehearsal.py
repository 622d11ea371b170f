"""The CPU rehearsal of a paper preset: the same DAG, arms, branching, gates, evaluation protocol, collect and
figures, on a toy-width model of the preset's family, with every substitution listed.

    preset, subs = rehearsal_preset(load_preset("qwen25-math-7b"), root)   # writes <root>/_rehearsal/*.yaml
    python reproduce/run_all.py --preset qwen25-math-7b --rehearse          # runs/qwen25-math-7b-rehearsal/

This module is the one owner of the substitutions: `substitutions(paper)` is the list (field, paper value,
rehearsal value, why); `rehearsal_preset` writes them as a preset whose `base:` is the paper preset's file,
so the driver, its jobs and the figures read it as any preset (its name `<paper>-rehearsal`: its own runs
folder). `protocol.rehearsal_of` marks it: collect writes the list into results.meta.json, and the figures,
tables and REPRODUCTION.md carry LABEL. Steps scale by STEP_SCALE (rounded, at least 1), so θ*, the late
start, the reset and restart points and the table steps keep the paper's order inside the scaled stages.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from reproduce.matrix.presets import ExperimentError, Preset, load_preset

LABEL = "REHEARSAL: plumbing only, the numbers are meaningless"
SUFFIX = "-rehearsal"
STEP_SCALE = 10           # the paper's steps / 10 (all of both presets' step numbers are multiples of 10)
FAMILIES = {"qwen25-math-7b": "qwen2", "qwen3-8b-base": "qwen3"}   # paper preset -> its model's family
WORLD_VERSION = 2         # the toy world's design (docs/toy_world.md): rewards vary on its base model
# run_all.py flags that size or place a GPU plan: meaningless in a rehearsal (one-line error)
GPU_FLAGS = ("pilot", "without_pilot", "net_floor_gbps", "partition", "account", "qos", "constraint", "nodes",
             "gpus_per_node", "mem_gb", "cpus_per_node", "cluster_nodes", "rollout_tokens_per_s",
             "update_tokens_per_s", "response_fill", "save_s", "decode_tokens_per_s", "push_s",
             "anchor_share", "gpu_check", "gpu_mem_gb", "budget_gpu_hours", "fetch_dir", "resources")
# the final evaluation: a few problems per shipped benchmark, the least k the paper protocol's pass@16 allows
EVAL_LIMIT = 2
EVAL_SAMPLES = 16
# hub-only benchmarks (the `fetch` job at paper scale): a shipped slice instead, or none (dropped)
HUB_BENCHMARKS = {"mmlu_pro": "mmlu_pro_sample300", "gpqa_diamond": None}
ENGINES = {"hf": "the HF engine on the CPU (--rehearse-engine vllm: vLLM's CPU build)",
           "vllm": "vLLM's CPU build (scripts/vllm_tier.sh), colocated as on the GPUs"}
# protocol fields that count RL steps (scaled); table_steps' entries too
STEP_FIELDS = ("stage1_steps", "stage2_steps", "peak_step", "qae_peak_step", "late_start_step",
               "armor_reset_every", "armor_reset_until", "reset_sweep", "restart_sweep",
               "stage2_warmup_steps", "kl_after_steps", "qae_reset_sweep", "qwen3_tau1_until",
               "stage2_validate_every")


# protocol fields that name arms: an arm named by its step (armor_restart_160) is renamed with its steps
ARM_FIELDS = ("headline_arm", "side_arms", "single_seed_arms")
STEP_ARM = re.compile(r"^((?:qae_)?armor_(?:reset|restart)_)(\d+)$")


@dataclass(frozen=True)
class Substitution:
    """One field of the paper preset the rehearsal sets otherwise (dotted key, both values, the reason)."""
    field: str
    paper: Any
    rehearsal: Any
    why: str

    def to_dict(self) -> dict:
        return {"field": self.field, "paper": self.paper, "rehearsal": self.rehearsal, "why": self.why}


def scale_steps(n: Any) -> Any:
    """A step count (or a list of them) of the paper at rehearsal scale: round(n / STEP_SCALE), at least 1;
    None and 0 stay (0 = the field's 'off' / 'default')."""
    if isinstance(n, list):
        return [scale_steps(x) for x in n]
    if not n:
        return n
    return max(1, round(n / STEP_SCALE))


def scale_arm(name: Any) -> Any:
    """An arm name (or a list of them) at rehearsal scale: the step in armor_restart_160 / armor_reset_160 /
    qae_armor_reset_150 scaled (scale_steps); other names as they are."""
    if isinstance(name, list):
        return [scale_arm(x) for x in name]
    m = STEP_ARM.match(name) if isinstance(name, str) else None
    return f"{m.group(1)}{scale_steps(int(m.group(2)))}" if m else name


def check_paper(name: str) -> None:
    """--rehearse takes a paper preset only (one-line error otherwise)."""
    if name not in FAMILIES:
        raise ExperimentError(f"--rehearse: preset {name!r} is not a paper preset (rehearsable: "
                              f"{', '.join(FAMILIES)}); a CPU preset runs as it is, without --rehearse")


def rehearsal_name(paper: Preset, engine: str = "hf") -> str:
    """The rehearsal preset's name (its runs folder): <paper>-rehearsal, -vllm after it with vLLM (its own
    world: another model)."""
    return f"{paper.name}{SUFFIX}" + ("" if engine == "hf" else f"-{engine}")


def world_arch(paper: Preset, engine: str = "hf") -> str | None:
    """protocol.world_arch of the rehearsal: Qwen3's layout for 8B; for 7B the shipped toy Qwen2, except
    under vLLM, whose CPU attention takes head widths 32 to 512 (the toy Qwen2's are 16): QWEN2_ARCH then."""
    family = FAMILIES[paper.name]
    return family if family == "qwen3" or engine != "hf" else None


def world_dir(root: Path, paper: Preset, engine: str = "hf") -> Path:
    return Path(root).resolve() / rehearsal_name(paper, engine) / "world"


def substitutions(paper: Preset, root: Path | str = "runs", engine: str = "hf") -> list[Substitution]:
    """Every field of `paper` the rehearsal changes, in the order of the preset file (engine: the rollout
    engine, hf or vllm's CPU build)."""
    check_paper(paper.name)
    if engine not in ENGINES:
        raise ExperimentError(f"--rehearse-engine: {engine!r} is not one of {', '.join(ENGINES)}")
    cfg, p = paper.cfg, paper.protocol
    family = FAMILIES[paper.name]
    world = world_dir(root, paper, engine)
    arch = world_arch(paper, engine)
    S = Substitution
    model = ("the shipped toy world v2's base model: toy Qwen2 (167K, Qwen2ForCausalLM, SFT on the toy "
             "world)" if arch is None else
             "a Qwen2ForCausalLM of toy width (reproduce/toy/model.py QWEN2_ARCH: GQA, q/k/v biases, untied "
             "lm_head, heads of 32 for vLLM's CPU attention), the toy world v2's quick SFT (`world` job)"
             if arch == "qwen2" else
             "a Qwen3ForCausalLM of toy width (reproduce/toy/model.py QWEN3_ARCH: q/k RMSNorm, explicit "
             "head_dim, GQA, untied lm_head), the toy world v2's quick SFT (`world` job)")
    out = [
        S("device", cfg.device, "cpu", "no GPU: the CPU"),
        S("threads", None, 1, "one torch thread a job: several jobs share the CPU cores"),
        S("model.path", cfg.model.path, str(world / "base_model"), model),
        S("model.display_name", cfg.model.display_name, f"toy {family} (rehearsal)",
          "the model column says it is a toy model"),
        S("parallel.compute_dtype", cfg.parallel.compute_dtype, "float32", "bf16 is a GPU setting"),
        S("data.train", cfg.data.train, str(world / "data" / "train.jsonl"),
          "the toy world's training prompts: rewards vary on the toy model (DAPO-Math-17k's do not)"),
        S("data.problem_field", cfg.data.problem_field, "problem", "the toy world's fields"),
        S("data.answer_field", cfg.data.answer_field, "answer", "the toy world's fields"),
        S("data.prompt_template", cfg.data.prompt_template, "plain", "the toy model was trained on plain "
          "prompts (the final evaluation keeps the paper protocol's DAPO prompt)"),
        S("reward.answer_mode", cfg.reward.answer_mode, "boxed", r"the toy world answers \boxed{d}"),
        S("reward.scorer", cfg.reward.scorer, "math_verify", "math_dapo reads an 'Answer:' line the toy "
          "model never writes: every reward would be -1 (the final evaluation keeps both scorers)"),
        S("reward.grader_workers", cfg.reward.grader_workers, 0, "digit answers: the grader's exact path "
          "in-process"),
        S("rollout.engine", cfg.rollout.engine, engine, ENGINES[engine]),
        S("rollout.gen_batch_prompts", cfg.rollout.gen_batch_prompts,
          cfg.rollout.gen_batch_prompts // cfg.batch.prompts_per_step * 4,
          "scaled with batch.prompts_per_step (the same multiple of B)"),
        S("lengths.max_prompt", cfg.lengths.max_prompt, 32, "toy prompts (~15 tokens)"),
        S("lengths.max_response", cfg.lengths.max_response, 48, "toy responses (a full chain ~34 tokens); "
          "also the final evaluation's budget"),
        S("lengths.overlong_buffer", cfg.lengths.overlong_buffer, 8, "shaping from 40 tokens, as the tiny "
          "presets"),
        S("batch.prompts_per_step", cfg.batch.prompts_per_step, 4, "B scaled down (CPU time)"),
        S("batch.mini_batch_prompts", cfg.batch.mini_batch_prompts, 2,
          "2 updates a step (the paper's 16: CPU time)"),
        S("optim.warmup_steps", cfg.optim.warmup_steps, scale_steps(cfg.optim.warmup_steps),
          f"steps / {STEP_SCALE}"),
        S("schedule.total_steps", cfg.schedule.total_steps, scale_steps(cfg.schedule.total_steps),
          f"steps / {STEP_SCALE}"),
        S("schedule.save_every", cfg.schedule.save_every, scale_steps(cfg.schedule.save_every),
          f"steps / {STEP_SCALE}"),
        S("schedule.validate_every", cfg.schedule.validate_every, scale_steps(cfg.schedule.validate_every),
          f"steps / {STEP_SCALE}, at least 1"),
        S("validation.benchmarks", list(cfg.validation.benchmarks),
          [f"toy_val={world / 'data' / 'validation.jsonl'}"], "the toy world's validation split (the "
          "curves θ* and the restarts are chosen on)"),
        S("validation.samples", cfg.validation.samples, 2, "CPU time"),
        S("validation.max_problems", cfg.validation.max_problems, 16, "CPU time"),
    ]
    if engine == "vllm":
        out.append(S("rollout.enforce_eager", cfg.rollout.enforce_eager, True,
                     "no torch.compile on the CPU: an engine starts in seconds"))
    if cfg.rollout.tensor_parallel_size != 1:
        out.append(S("rollout.tensor_parallel_size", cfg.rollout.tensor_parallel_size, 1,
                     "one engine per rank on the CPU"))
    for f in STEP_FIELDS:
        v = getattr(p, f)
        if v and scale_steps(v) != v:
            out.append(S(f"protocol.{f}", v, scale_steps(v), f"steps / {STEP_SCALE}"))
    for f in ARM_FIELDS:
        v = getattr(p, f)
        if scale_arm(v) != v:
            out.append(S(f"protocol.{f}", v, scale_arm(v), "the arm named by its scaled step"))
    for k, v in vars(p.table_steps).items():
        if v:
            out.append(S(f"protocol.table_steps.{k}", v, scale_steps(v), f"steps / {STEP_SCALE}"))
    bench = [b for b in (HUB_BENCHMARKS.get(b, b) for b in p.eval_benchmarks) if b]
    if bench != list(p.eval_benchmarks):
        out.append(S("protocol.eval_benchmarks", list(p.eval_benchmarks), bench,
                     "hub-only benchmarks: mmlu_pro -> the shipped 300-problem slice (evaluated; the tables' "
                     "MMLU-Pro column stays empty: a slice is not MMLU-Pro), gpqa_diamond (gated, not "
                     "shipped) dropped; nothing is fetched"))
    out += [
        S("protocol.eval_limit", p.eval_limit, EVAL_LIMIT, "a few problems per benchmark (CPU time)"),
        S("protocol.eval_samples", p.eval_samples, EVAL_SAMPLES,
          "k = 16, the least the paper protocol's pass@16 allows (the paper's 32)"),
        S("protocol.nodes", p.nodes, 1, "one node: the local SLURM's"),
        S("protocol.gpus_per_node", p.gpus_per_node, 0, "no GPUs: a CPU plan (no GPU sizing, no pilot)"),
        S("protocol.world_version", p.world_version, WORLD_VERSION, "the toy world's design"),
    ]
    if arch:
        out.append(S("protocol.world_arch", p.world_arch, arch, f"the world job builds the {arch} layout"))
    return [s for s in out if s.paper != s.rehearsal]      # (e.g. the engine where vllm stays vllm)


def _nest(subs: list[Substitution]) -> dict:
    """The substitutions as a nested YAML mapping (dotted keys split)."""
    out: dict = {}
    for s in subs:
        *path, last = s.field.split(".")
        d = out
        for k in path:
            d = d.setdefault(k, {})
        d[last] = s.rehearsal
    return out


def rehearsal_preset(paper: Preset, root: Path | str,
                     engine: str = "hf") -> tuple[Preset, list[Substitution]]:
    """The rehearsal preset of `paper` (written to <root>/_rehearsal/<paper>-rehearsal.yaml, loaded and
    validated as any preset) and its substitutions. engine: the rollout engine (hf, or vllm's CPU build)."""
    subs = substitutions(paper, root, engine)
    name = rehearsal_name(paper, engine)
    data = {"base": str(paper.path), "name": name, **_nest(subs)}
    data.setdefault("protocol", {})["rehearsal_of"] = paper.name
    path = Path(root).resolve() / "_rehearsal" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (f"# {LABEL}\n# written by reproduce/matrix/rehearsal.py from {paper.path.name}; every field "
            f"below is a substitution (run_all.py --rehearse prints why)\n"
            + yaml.safe_dump(data, sort_keys=False))
    if not path.is_file() or path.read_text() != text:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return load_preset(path), subs


def substitution_lines(subs: list[Substitution]) -> list[str]:
    """The substitutions as the driver prints them (one a line; REPRODUCTION.md tables them:
    figures/report.py rehearsal_section)."""
    return [f"- `{s.field}`: {s.paper!r} -> {s.rehearsal!r} ({s.why})" for s in subs]


def of_preset(preset: Preset, root: Path | str) -> list[Substitution]:
    """A rehearsal preset's substitutions (from its paper preset and its engine); [] for a real preset."""
    paper = preset.protocol.rehearsal_of
    if not paper:
        return []
    return substitutions(load_preset(paper), root, preset.cfg.rollout.engine)
