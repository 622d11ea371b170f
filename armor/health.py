"""Run health: stop a run that is computing garbage before its next update, with the metric, value, engine
and step named, so that it never ends DONE (rollout.max_logprob_mismatch, rollout.max_steps_without_kept).

Two signs, both read from a step's metrics row:
  logprob_mismatch  mean_t |log π_engine(y_t) − log π_trainer(y_t)| over the step's on-policy tokens
                    (armor.objectives.logprob_mismatch): above the bound, the engine is not sampling the
                    weights being trained (a push that missed a layer, a wrong dtype, a stale engine)
  prompts_kept      0 on `max_steps_without_kept` consecutive steps: nothing learnable is kept
"""
from __future__ import annotations

# The default bound on logprob_mismatch by the dtype the engine and the trainer compute in: fp32 kernels
# agree to ~1e-6 (the HF engine; vLLM's CPU build: ~5e-7), bf16 ones to a few 1e-2 at the paper's widths; a
# push that misses a layer is off by nats (4.4 when the tied lm_head stayed random).
MISMATCH_BOUNDS = {"float32": 1e-3, "bfloat16": 0.1, "float16": 0.1}


class RunHealthError(RuntimeError):
    """The run computes garbage; it stops before its next update (and writes no DONE)."""


def mismatch_bound(configured: float | None, compute_dtype: str) -> float:
    """The logprob_mismatch bound in force: the configured one, else MISMATCH_BOUNDS[compute_dtype]."""
    return float(configured) if configured is not None else MISMATCH_BOUNDS[compute_dtype]


class HealthMonitor:
    """Checks each step's metrics row; raises RunHealthError when a bound is crossed. `engine` names the
    rollout engine in the message; the count of steps without a kept prompt travels in the checkpoint."""

    def __init__(self, max_mismatch: float, max_steps_without_kept: int | None, engine: str):
        self.max_mismatch, self.engine = max_mismatch, engine
        self.max_steps_without_kept = max_steps_without_kept
        self.steps_without_kept = 0

    def check(self, row: dict) -> None:
        """row: a step's metrics (step, prompts_kept, logprob_mismatch when the engine gave log-probs)."""
        step, mm = row["step"], row.get("logprob_mismatch")
        if mm is not None and not mm <= self.max_mismatch:          # NaN fails too
            raise RunHealthError(
                f"step {step}: logprob_mismatch {mm:.4g} exceeds rollout.max_logprob_mismatch "
                f"{self.max_mismatch:g} (engine {self.engine}): the engine's log-probs of its own samples "
                "differ from the trainer's, so it is not sampling the weights being trained (a weight push "
                "that missed a layer, a dtype mismatch); the run stops before its next update")
        self.steps_without_kept = self.steps_without_kept + 1 if row["prompts_kept"] == 0 else 0
        n = self.max_steps_without_kept
        if n is not None and self.steps_without_kept >= n:
            raise RunHealthError(
                f"step {step}: prompts_kept 0 on {self.steps_without_kept} consecutive steps "
                f"(rollout.max_steps_without_kept {n}, engine {self.engine}, {row.get('prompts_drawn')} "
                f"drawn this step, accuracy {row.get('accuracy')}): nothing learnable is kept; the run stops")

    def state_dict(self) -> dict:
        return {"steps_without_kept": self.steps_without_kept}

    def load_state_dict(self, state: dict) -> None:
        self.steps_without_kept = int(state.get("steps_without_kept", 0))
