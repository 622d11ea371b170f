"""Per-token policy objectives of ARMOR (ARMOR paper §3-4), as small pure tensor functions.

Conventions (verl core_algos style):
  B = sequences, T = response positions.
  logp, old_logp, ref_logp : [B, T] natural-log probabilities of the *sampled* tokens under
      πθ (current, with grad), πθold (behaviour policy of the rollout), πref (reference).
  mask : [B, T] float or bool, 1 = real response token, 0 = padding.
Robustness: masked positions are removed with torch.where (never x * 0, which is NaN for inf),
every log-ratio is clamped to ±clamp before exp, and all divisions by token / sequence counts
are clamped away from 0, so log-probs down to ~-80 and rows whose mask is all zero give finite
values and finite gradients.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

import torch

from armor.registry import Registry

Tensor = torch.Tensor
Number = Union[float, int]

__all__ = [
    "masked_sum", "masked_mean", "log_ratio", "importance_ratio", "mixed_log_prob", "mixed_ratio",
    "ratio_and_clip_range", "clipped_surrogate", "aggregate_loss", "kl_penalty", "kl_reverse_estimate",
    "kl_forward_estimate", "kl_reverse_tokens", "kl_forward_tokens", "logprob_gap_tokens", "logprob_mismatch",
    "pad_token_values", "ROLLOUT_CORRECTION_MODES", "ROLLOUT_CORRECTION_LEVELS", "rollout_log_ratio",
    "rollout_correction", "opd_token_advantages", "mopd_token_advantages", "LossConfig", "policy_loss",
    "RATIOS", "LOSS_AGGREGATIONS", "KL_ESTIMATORS",
]

# the variants, registered by name below with what each needs (armor.registry); config validation reads them
RATIOS = Registry("ratio variant", "algo.mix.variant")
LOSS_AGGREGATIONS = Registry("loss aggregation", "algo.loss_agg")
KL_ESTIMATORS = Registry("KL estimator", "algo.kl.estimator")


# ----------------------------------------------------------------------------- masking

def _mask_like(mask: Optional[Tensor], x: Tensor) -> Tensor:
    """mask (bool/float, broadcastable to x, None = all ones) -> float tensor of x's shape/dtype."""
    dtype = x.dtype if x.is_floating_point() else torch.float32
    if mask is None:
        return torch.ones(x.shape, dtype=dtype, device=x.device)
    return torch.broadcast_to(mask.to(device=x.device, dtype=dtype), x.shape)


def masked_sum(x: Tensor, mask: Optional[Tensor], dim=None) -> Tensor:
    """Σ_t mask_t · x_t over `dim` (all dims if None).  x, mask: [B, T] (mask broadcastable).

    Masked positions contribute exactly 0 even if x is inf/NaN there (torch.where, not x*0).
    """
    x = x if x.is_floating_point() else x.float()
    m = _mask_like(mask, x)
    y = torch.where(m != 0, x * m, torch.zeros((), dtype=x.dtype, device=x.device))
    return y.sum() if dim is None else y.sum(dim)


def masked_mean(x: Tensor, mask: Optional[Tensor], dim=None, eps: float = 1e-8) -> Tensor:
    """Σ mask·x / max(Σ mask, eps) over `dim`.  An all-zero mask gives exactly 0 (no NaN).

    Unlike verl (which adds 1e-8 to the count) the count is clamped, so the mean is exact.
    """
    x = x if x.is_floating_point() else x.float()
    m = _mask_like(mask, x)
    count = m.sum() if dim is None else m.sum(dim)
    return masked_sum(x, m, dim) / count.clamp(min=eps)


# ----------------------------------------------------------------------------- ratios

def log_ratio(logp: Tensor, old_logp: Tensor, clamp: float = 20.0) -> Tensor:
    """clamp(log πθ − log πθold, −clamp, clamp), [B, T] (verl clamps at ±20)."""
    return torch.clamp(logp - old_logp, min=-clamp, max=clamp)


def importance_ratio(logp: Tensor, old_logp: Tensor, clamp: float = 20.0) -> Tensor:
    """r = πθ/πθold = exp(clamped log-ratio), [B, T]."""
    return torch.exp(log_ratio(logp, old_logp, clamp))


def _check_alpha(alpha) -> float:
    alpha = float(alpha)
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    return alpha


def mixed_log_prob(logp: Tensor, ref_logp: Optional[Tensor], alpha: Number) -> Tensor:
    """log π_mix = log(α·π + (1−α)·πref) = logaddexp(log α + log π, log(1−α) + log πref), [B, T].

    α = 1 returns `logp` itself (bit-exact, no log(0)); ref_logp may then be None.
    """
    alpha = _check_alpha(alpha)
    if alpha == 1.0:
        return logp
    if ref_logp is None:
        raise ValueError("mixed_log_prob with alpha < 1 needs ref_logp")
    return torch.logaddexp(logp + math.log(alpha), ref_logp + math.log1p(-alpha))


def mixed_ratio(logp: Tensor, old_logp: Tensor, ref_logp: Optional[Tensor], alpha: Number,
                clamp: float = 20.0) -> Tensor:
    """r_mix = π_mix,θ / π_mix,old, π_mix,· = α·π· + (1−α)·πref (ARMOR Mixed Optimization), [B, T].

    Computed as exp(clamp(log π_mix,θ − log π_mix,old)).  α = 1 gives exactly importance_ratio;
    with πref = πθold it equals α·r + (1−α).
    """
    return torch.exp(log_ratio(mixed_log_prob(logp, ref_logp, alpha),
                               mixed_log_prob(old_logp, ref_logp, alpha), clamp))


def ratio_and_clip_range(variant: str, logp: Tensor, old_logp: Tensor, ref_logp: Optional[Tensor] = None,
                         alpha: Number = 1.0, eps_low: float = 0.2, eps_high: float = 0.28,
                         is_anchor: Optional[Tensor] = None, clamp: float = 20.0):
    """Ratio [B, T] and effective clip range (eps_low_eff, eps_high_eff) of a registered ratio variant
    (RATIOS).

    "plain"            r = πθ/πθold,                         ε as given (DAPO).
    "mixed"            r_mix = π_mix,θ/π_mix,old (α, πref),  ε as given (ARMOR); α = 1 is "plain".
    "static_clip"      r = πθ/πθold,                         ε/α on both sides (Fig. 3b ablation).
    "offpolicy_anchor" r = πθ/πθold on on-policy tokens, r = πθ/πref on anchor tokens
                       (is_anchor [B] rows or [B, T] tokens, bool), ε as given (Fig. 3b ablation).
    A new variant is one function `(logp, old_logp, ref_logp, alpha, eps_low, eps_high, is_anchor, clamp) ->
    (ratio, eps_low, eps_high)` decorated with `@RATIOS.register(name, needs=...)`, plus its test.
    """
    return RATIOS[variant].fn(logp, old_logp, ref_logp, alpha, eps_low, eps_high, is_anchor, clamp)


@RATIOS.register("plain")
def _plain_ratio(logp, old_logp, ref_logp, alpha, eps_low, eps_high, is_anchor, clamp):
    return importance_ratio(logp, old_logp, clamp), eps_low, eps_high


@RATIOS.register("mixed", needs={"reference"})
def _mixed_ratio(logp, old_logp, ref_logp, alpha, eps_low, eps_high, is_anchor, clamp):
    return mixed_ratio(logp, old_logp, ref_logp, alpha, clamp), eps_low, eps_high


@RATIOS.register("static_clip")
def _static_clip_ratio(logp, old_logp, ref_logp, alpha, eps_low, eps_high, is_anchor, clamp):
    alpha = _check_alpha(alpha)
    return importance_ratio(logp, old_logp, clamp), eps_low / alpha, eps_high / alpha


@RATIOS.register("offpolicy_anchor", needs={"reference", "anchors"})
def _offpolicy_anchor_ratio(logp, old_logp, ref_logp, alpha, eps_low, eps_high, is_anchor, clamp):
    if ref_logp is None or is_anchor is None:
        raise ValueError("ratio variant 'offpolicy_anchor' needs ref_logp and is_anchor")
    anc = is_anchor.to(device=logp.device, dtype=torch.bool)
    if anc.dim() == logp.dim() - 1:
        anc = anc.unsqueeze(-1)
    anc = torch.broadcast_to(anc, logp.shape)
    r = torch.where(anc, importance_ratio(logp, ref_logp, clamp), importance_ratio(logp, old_logp, clamp))
    return r, eps_low, eps_high


# ----------------------------------------------------------------------------- surrogate

def clipped_surrogate(ratio: Tensor, advantages: Tensor, mask: Optional[Tensor], eps_low: float,
                      eps_high: float, dual_clip_c: Optional[float] = None,
                      uncertain: Optional[Tensor] = None):
    """PPO clipped surrogate per token, with clip-higher and optional dual-clip (verl semantics).

    ratio [B, T]; advantages [B] (broadcast over tokens) or [B, T], treated as constants (detached).
        L_t = −min(r·A, clip(r, 1−ε_low, 1+ε_high)·A) = max(−r·A, −clip(r)·A)
        dual-clip, A < 0 only:  L_t = min(L_t, −c·A)      (c > 1; caps the loss of huge ratios)
    Returns (loss [B, T] with 0 at masked positions, stats) where stats holds detached 0-dim tensors
    (token means over the mask):
        clipfrac       tokens where the clipped term is active (−clip(r)·A > −r·A), = low + high
        clipfrac_low   r < 1−ε_low and A < 0      clipfrac_high  r > 1+ε_high and A > 0
        dualclip_frac  A < 0 and −c·A < L_t (dual-clip active; 0 without dual-clip)
    uncertain [B, T] bool (optional): the tokens whose old probability is low (policy_loss: πθold < 0.9); adds
        uncertain_frac          share of tokens that are uncertain
        clipfrac_and_uncertain  share of tokens that are uncertain and clipped
    Both are means over all tokens, so they combine over micro-batches like clipfrac; the clip share among the
    uncertain tokens is their ratio (clipfrac_and_uncertain / uncertain_frac, summed over the steps of
    interest).
    """
    adv = advantages.detach().to(device=ratio.device, dtype=ratio.dtype)
    if adv.dim() == ratio.dim() - 1:
        adv = adv.unsqueeze(-1)
    adv = torch.broadcast_to(adv, ratio.shape)
    m = _mask_like(mask, ratio)

    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(pg1, pg2)
    neg = adv < 0
    dual = torch.zeros_like(neg)
    if dual_clip_c is not None:
        if dual_clip_c <= 1.0:
            raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
        pg3 = -adv * dual_clip_c
        dual = neg & (loss > pg3)
        loss = torch.where(neg, torch.minimum(loss, pg3), loss)
    loss = torch.where(m != 0, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))

    with torch.no_grad():
        stats = {
            "clipfrac": masked_mean((pg2 > pg1).float(), m),
            "clipfrac_low": masked_mean(((ratio < 1.0 - eps_low) & neg).float(), m),
            "clipfrac_high": masked_mean(((ratio > 1.0 + eps_high) & (adv > 0)).float(), m),
            "dualclip_frac": masked_mean(dual.float(), m),
        }
        if uncertain is not None:
            unc = torch.broadcast_to(uncertain.to(ratio.device), ratio.shape)
            stats["uncertain_frac"] = masked_mean(unc.float(), m)
            stats["clipfrac_and_uncertain"] = masked_mean(((pg2 > pg1) & unc).float(), m)
    return loss, stats


def aggregate_loss(per_token: Tensor, mask: Optional[Tensor], mode: str,
                   normalizer: Optional[Union[Number, Tensor]] = None, eps: float = 1e-8) -> Tensor:
    """Reduce a per-token loss [B, T] to a scalar.

    "token-mean"           Σ_{b,t} m·L / N,  N = Σ m (DAPO).  `normalizer` replaces N: pass the
                           mini-batch's token count to every micro-batch and the micro-batch losses
                           add up to the mini-batch token mean.
    "seq-mean-token-mean"  Σ_b (Σ_t m·L / Σ_t m) / S   (GRPO)
    "seq-mean-token-sum"   Σ_b (Σ_t m·L) / S
    S = number of sequences with at least one real token (fully padded rows are not counted;
    verl divides by B instead); `normalizer` replaces S in the seq modes.
    All counts are clamped at eps, so an all-padding batch gives 0.
    """
    m = _mask_like(mask, per_token)
    num, denom = LOSS_AGGREGATIONS[mode].fn(per_token, m, normalizer, eps)
    denom = torch.as_tensor(denom, dtype=num.dtype, device=num.device)
    return num / denom.clamp(min=eps)


@LOSS_AGGREGATIONS.register("token-mean")
def _token_mean(per_token, m, normalizer, eps):
    return masked_sum(per_token, m), (m.sum() if normalizer is None else normalizer)


def _seq_mean(per_token, m, normalizer, eps, token_mean: bool):
    seq = masked_sum(per_token, m, dim=-1)
    if token_mean:
        seq = seq / m.sum(-1).clamp(min=eps)
    return seq.sum(), ((m.sum(-1) > 0).sum() if normalizer is None else normalizer)


@LOSS_AGGREGATIONS.register("seq-mean-token-mean")
def _seq_mean_token_mean(per_token, m, normalizer, eps):
    return _seq_mean(per_token, m, normalizer, eps, token_mean=True)


@LOSS_AGGREGATIONS.register("seq-mean-token-sum")
def _seq_mean_token_sum(per_token, m, normalizer, eps):
    return _seq_mean(per_token, m, normalizer, eps, token_mean=False)


# ----------------------------------------------------------------------------- KL

def kl_penalty(logp: Tensor, ref_logp: Tensor, estimator: str, clamp: float = 20.0,
               value_clamp: Optional[float] = 10.0) -> Tensor:
    """Per-token estimator of KL(πθ‖πref) for tokens sampled from πθ, [B, T] (Schulman's k1/k2/k3).

    With log ρ = log πref − log πθ:
      "k1" (verl "kl")         log πθ − log πref = −log ρ                 (unbiased, can be < 0)
      "k2" (verl "mse")        ½ (log πref − log πθ)²                     (≥ 0, biased)
      "k3" (verl "low_var_kl") ρ − log ρ − 1, log ρ clamped to ±clamp     (≥ 0, = 0 iff πθ = πref,
                               unbiased since E_πθ[ρ] = 1).  Computed as expm1(log ρ) − log ρ.
    value_clamp: k3 is clamped to ≤ value_clamp like verl's low_var_kl ([-10, 10]); None = no clamp.
    """
    return KL_ESTIMATORS[estimator].fn(logp, ref_logp, clamp, value_clamp)


@KL_ESTIMATORS.register("k1", needs={"reference"})
def _k1(logp, ref_logp, clamp, value_clamp):
    return logp - ref_logp


@KL_ESTIMATORS.register("k2", needs={"reference"})
def _k2(logp, ref_logp, clamp, value_clamp):
    return 0.5 * (ref_logp - logp).square()


@KL_ESTIMATORS.register("k3", needs={"reference"})
def _k3(logp, ref_logp, clamp, value_clamp):
    lr = torch.clamp(ref_logp - logp, min=-clamp, max=clamp)
    k3 = torch.clamp(torch.expm1(lr) - lr, min=0.0)
    return k3 if value_clamp is None else torch.clamp(k3, max=value_clamp)


for _verl, _ours in {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}.items():   # verl's names
    KL_ESTIMATORS.alias(_verl, _ours)


def kl_reverse_tokens(logp: Tensor, ref_logp: Tensor, clamp: float = 20.0) -> Tensor:
    """Per-token k3 estimate of the reverse KL(πθ‖πref) for tokens y_t ~ πθ(·|prefix), [B, T]:
        ρ − log ρ − 1,  ρ = πref/πθ (log ρ clamped to ±clamp; no value clamp).

    Derivation: E_{y~πθ}[−log ρ] = Σ_y πθ log(πθ/πref) = KL(πθ‖πref) and E_{y~πθ}[ρ − 1] = Σ_y πref − 1 = 0,
    so k3 is unbiased for the per-token conditional reverse KL and ≥ 0 (x − 1 ≥ log x)."""
    return kl_penalty(logp, ref_logp, "k3", clamp=clamp, value_clamp=None)


def kl_forward_tokens(logp: Tensor, ref_logp: Tensor, clamp: float = 20.0) -> Tensor:
    """Per-token estimate of the forward KL(πref‖πθ) from the same tokens y_t ~ πθ(·|prefix), [B, T]:
        ρ·log ρ − ρ + 1,  ρ = πref/πθ (log ρ clamped to ±clamp), clamped at 0.

    Derivation: importance-weight with ρ: KL(πref‖πθ) = Σ_y πref log(πref/πθ) = E_{y~πθ}[ρ log ρ], plus the
    zero-mean control variate −(ρ − 1) (E_πθ[ρ] = 1): unbiased for the per-token conditional forward KL and
    ≥ 0 (x log x ≥ x − 1). Valid where πθ covers πref's support."""
    lr = torch.clamp(ref_logp - logp, min=-clamp, max=clamp)
    return torch.clamp(torch.exp(lr) * lr - torch.expm1(lr), min=0.0)


def kl_reverse_estimate(logp: Tensor, ref_logp: Tensor, mask: Optional[Tensor],
                        clamp: float = 20.0) -> Tensor:
    """Scalar estimate of the reverse KL(πθ‖πref): the masked token mean of kl_reverse_tokens."""
    return masked_mean(kl_reverse_tokens(logp, ref_logp, clamp), mask)


def kl_forward_estimate(logp: Tensor, ref_logp: Tensor, mask: Optional[Tensor],
                        clamp: float = 20.0) -> Tensor:
    """Scalar estimate of the forward KL(πref‖πθ): the masked token mean of kl_forward_tokens."""
    return masked_mean(kl_forward_tokens(logp, ref_logp, clamp), mask)


# ----------------------------------------------------------------------------- training/inference mismatch

def pad_token_values(rows: list, width: int, device=None) -> tuple[Tensor, Tensor]:
    """Per-response token values (lists of floats, response position 0 first) as a [B, width] tensor, zeros
    after each row's end, and the [B, width] float mask of the positions a row has. Rows longer than width
    are cut. pad_token_values([[-1.0, -2.0], []], 3) = ([[-1, -2, 0], [0, 0, 0]], [[1, 1, 0], [0, 0, 0]])."""
    vals = torch.zeros(len(rows), width, device=device)
    have = torch.zeros(len(rows), width, device=device)
    for i, r in enumerate(rows):
        n = min(len(r), width)
        if n:
            vals[i, :n] = torch.as_tensor(list(r[:n]), dtype=torch.float32, device=device)
            have[i, :n] = 1.0
    return vals, have


def logprob_gap_tokens(engine_logp: Tensor, trainer_logp: Tensor, mask: Optional[Tensor]) -> Tensor:
    """Per-token |log π_engine(y_t) − log π_trainer(y_t)|, [B, T];
    0 at masked positions (even if inf there)."""
    return torch.where(_mask_like(mask, trainer_logp) != 0, (engine_logp - trainer_logp).abs(),
                       torch.zeros((), dtype=trainer_logp.dtype, device=trainer_logp.device))


def logprob_mismatch(engine_logp: Tensor, trainer_logp: Tensor, mask: Optional[Tensor]) -> Tensor:
    """Training/inference mismatch: mean_t |log π_engine(y_t) − log π_trainer(y_t)| over the masked tokens.

    engine_logp: the rollout engine's log-probs of the tokens it sampled (vLLM: processed_logprobs, i.e. after
    temperature and top_p); trainer_logp: the trainer's log-probs of the same tokens at the sampling weights
    (θold) and temperature. Both [B, T]; 0 when they agree exactly, and it grows with the numerical gap
    between the two implementations (bf16 kernels, batch shapes) that makes on-policy samples slightly
    off-policy. With top_p < 1 the engine's log-probs are renormalised over the nucleus, the trainer's are
    not: the gap then includes that by design. Masked positions are ignored even if inf there; an all-zero
    mask gives 0."""
    return masked_mean(logprob_gap_tokens(engine_logp, trainer_logp, mask), mask)


# ----------------------------------------------------------------------------- rollout correction
# The rollout engine samples from π_rollout, numerically not quite θold (bf16 kernels, batch shapes): the
# "on-policy" tokens are slightly off-policy. The correction reweights each token's policy-gradient loss by a
# constant built from ρ = πθold(y_t) / π_rollout(y_t) (trainer's θold over the engine's log-prob of the token
# it sampled): TIS (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training";
# verl algorithm.rollout_correction.rollout_is with rollout_is_threshold) truncates it, MIS (masked IS:
# IcePop, Ling Team 2025; Liu, Li et al. 2025, "When Speed Kills Stability", Token-/Seq-MIS) drops the
# tokens whose ρ leaves [C_low, C]. verl: trainer/ppo/rollout_corr_helper.py, core_algos.py (pg_losses *
# rollout_is_weights).
# ARMOR's anchors are not corrected (the trainer's mask leaves them out): their behaviour policy is πref's
# engine, and the authors' mixed ratio already treats an anchor as a sample of π_mix with no importance weight
# toward πref; the anchor is chosen by its reward (the first correct of ref_n samples), so it is no draw from
# πref whose density a per-token ratio could correct; and πref's trainer log-probs, which such a ratio needs,
# are not computed by every arm.
ROLLOUT_CORRECTION_MODES = ("none", "tis", "mis")
ROLLOUT_CORRECTION_LEVELS = ("token", "sequence")


def rollout_log_ratio(old_logp: Tensor, rollout_logp: Tensor, mask: Optional[Tensor], level: str = "token",
                      clamp: float = 20.0) -> Tensor:
    """log ρ of the rollout correction, [B, T], detached; 0 (ρ = 1) at masked positions, even if inf there.

        token:     log ρ_t = clamp(log πθold(y_t) − log π_rollout(y_t), ±clamp)
        sequence:  log ρ_t = clamp(Σ_s m_s·(log πθold(y_s) − log π_rollout(y_s)), ±clamp), the same for every
                   masked-in t of the row (ρ_seq = Π_s ρ_s, verl's rollout_is="sequence")
    old_logp: the trainer's θold log-probs of the sampled tokens; rollout_logp: the engine's; mask [B, T] the
    tokens to correct (1) or leave alone (0). The clamp is verl's SAFETY_BOUND (20).
    """
    if level not in ROLLOUT_CORRECTION_LEVELS:
        raise ValueError(f"rollout correction level must be one of {ROLLOUT_CORRECTION_LEVELS}, "
                         f"got {level!r}")
    old_logp, rollout_logp = old_logp.detach(), rollout_logp.detach().to(old_logp)
    m = _mask_like(mask, old_logp)
    zero = torch.zeros((), dtype=old_logp.dtype, device=old_logp.device)
    diff = torch.where(m != 0, old_logp - rollout_logp, zero)
    if level == "sequence":
        diff = torch.broadcast_to(diff.sum(-1, keepdim=True), diff.shape)
    return torch.where(m != 0, torch.clamp(diff, min=-clamp, max=clamp), zero)


def _check_rollout_correction(mode: str, threshold: Optional[float],
                              threshold_lower: Optional[float]) -> float:
    """C_low of mode `mis` (1/C when threshold_lower is None), 0 for the others; a bad value: ValueError."""
    if mode not in ROLLOUT_CORRECTION_MODES:
        raise ValueError(f"rollout correction mode must be one of {ROLLOUT_CORRECTION_MODES}, got {mode!r}")
    if mode == "none":
        return 0.0
    if threshold is None or not float(threshold) > 1.0:
        raise ValueError(f"rollout correction {mode!r} needs a threshold C > 1, got {threshold!r}")
    if threshold_lower is not None and mode != "mis":
        raise ValueError(f"rollout correction threshold_lower applies to mode 'mis' only, not {mode!r}")
    if mode != "mis":
        return 0.0
    lower = 1.0 / float(threshold) if threshold_lower is None else float(threshold_lower)
    if not 0.0 <= lower < 1.0:
        raise ValueError(f"rollout correction threshold_lower must be in [0, 1), got {threshold_lower!r}")
    return lower


def rollout_correction(old_logp: Tensor, rollout_logp: Tensor, mask: Optional[Tensor], mode: str,
                       threshold: Optional[float] = None, threshold_lower: Optional[float] = None,
                       level: str = "token", clamp: float = 20.0) -> tuple[Tensor, Tensor, Tensor]:
    """The rollout–training mismatch correction of the policy-gradient loss: (w, ρ, cut), [B, T] each,
    detached.

    ρ = exp(rollout_log_ratio(old_logp, rollout_logp, mask, level, clamp)) (πθold / π_rollout; sequence level:
    the row's product), C = threshold, C_low = threshold_lower (mis; default 1/C, 0 = no lower bound):
        none  w = 1
        tis   w = min(ρ, C)                   cut = ρ > C               (truncated IS)
        mis   w = ρ · 1[C_low ≤ ρ ≤ C]        cut = ρ outside [C_low, C] (masked IS)
    w multiplies the per-token clipped surrogate (verl: pg_losses * rollout_is_weights) and is a constant (no
    gradient); w = 1 and cut = False at masked positions (tokens not corrected). A masked-out token keeps its
    place in the loss's normaliser (IcePop's and Liu et al.'s estimator E[ρ·1[..]·A·∇log π]; verl's rejection
    sampling instead drops it from the denominator): the trainer fixes the normaliser per mini-batch before
    the first mini-batch's θold log-probs exist (they come from its own forward).
    With the engine and trainer in agreement (ρ = 1) every mode gives w = 1.
    """
    lower = _check_rollout_correction(mode, threshold, threshold_lower)
    log_rho = rollout_log_ratio(old_logp, rollout_logp, mask, level, clamp)
    rho = torch.exp(log_rho)
    m = _mask_like(mask, rho) != 0
    if mode == "none":
        return torch.ones_like(rho), rho, torch.zeros_like(m)
    if mode == "tis":
        cut = rho > threshold
        w = torch.clamp(rho, max=float(threshold))
    else:
        cut = (rho > threshold) | (rho < lower)
        w = torch.where(cut, torch.zeros_like(rho), rho)
    cut = cut & m
    return torch.where(m, w, torch.ones_like(w)), rho, cut


# ----------------------------------------------------------------------------- distillation

def opd_token_advantages(teacher_logp: Tensor, student_logp: Tensor, mask: Optional[Tensor]) -> Tensor:
    """On-policy distillation (Agarwal et al. 2024) per-token advantage, [B, T]:
        A_t = log π_teacher(y_t) − log π_student(y_t)   (negative per-token reverse-KL sample, k1)
    on student-sampled tokens; 0 at masked positions; detached (an advantage is a constant).
    """
    adv = (teacher_logp - student_logp).detach()
    return torch.where(_mask_like(mask, adv) != 0, adv, torch.zeros((), dtype=adv.dtype, device=adv.device))


def mopd_token_advantages(outcome_adv: Tensor, teacher_logp: Tensor, student_logp: Tensor,
                          mask: Optional[Tensor], coef: float = 1.0) -> Tensor:
    """MOPD per-token advantage, [B, T]: A_t = Â_outcome + coef · (log π_teacher − log π_student).

    outcome_adv [B] (broadcast over tokens) or [B, T]; 0 at masked positions; detached.
    """
    opd = opd_token_advantages(teacher_logp, student_logp, mask)
    out = outcome_adv.detach().to(device=opd.device, dtype=opd.dtype)
    if out.dim() == opd.dim() - 1:
        out = out.unsqueeze(-1)
    adv = out + coef * opd
    return torch.where(_mask_like(mask, adv) != 0, adv, torch.zeros((), dtype=adv.dtype, device=adv.device))


# ----------------------------------------------------------------------------- full loss

# policy_loss metrics aggregated like the loss (global normaliser): a mini-batch's value is the sum over its
# micro-batches; every other metric is a masked token mean, combined weighted by the micro-batches' token
# counts
ADDITIVE_METRICS = ("pg_loss", "kl_penalty")
# a token is "uncertain" when its old probability is below 0.9: the tokens where a ratio can move (in the tiny
# world ≈ 97% of tokens are near-deterministic, so the clip fraction over all tokens hides what clipping does)
UNCERTAIN_LOGP = math.log(0.9)


@dataclass(frozen=True)
class LossConfig:
    """The objective's settings, fixed for a run (the trainer builds one from algo.*): the ratio variant and
    its α, the clip range ε_low/ε_high and dual-clip c, the loss aggregation, the KL penalty's β and
    estimator, the clamp of every log-ratio, and the rollout correction (rollout_correction: its mode,
    threshold C, mis's lower threshold, level)."""
    ratio_variant: str = "plain"
    alpha: float = 1.0
    eps_low: float = 0.2
    eps_high: float = 0.28
    dual_clip_c: Optional[float] = None
    loss_agg: str = "token-mean"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    clamp: float = 20.0
    rollout_correction: str = "none"
    rollout_threshold: Optional[float] = None
    rollout_threshold_lower: Optional[float] = None
    rollout_level: str = "token"


def policy_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor,
                cfg: LossConfig = LossConfig(),
                *, ref_logp: Optional[Tensor] = None, is_anchor: Optional[Tensor] = None,
                normalizer: Optional[Union[Number, Tensor]] = None,
                rollout_logp: Optional[Tensor] = None, rollout_mask: Optional[Tensor] = None):
    """Full policy loss: ratio_and_clip_range → clipped_surrogate (× w) → + kl_coef·kl_penalty →
    aggregate_loss.

        L = agg_t( w_t · PPO_clip(r, A; ε_low_eff, ε_high_eff, c)_t + β · KL_t )
    logp [B, T] (with grad), old_logp/ref_logp [B, T], advantages [B] or [B, T], mask [B, T]; `cfg` the
    objective's settings (LossConfig), `is_anchor` [B] bool (anchor rows), `normalizer` the aggregation's.
    The KL term is the loss-level penalty of the KL baselines (needs ref_logp when kl_coef > 0).
    w: the rollout correction (cfg.rollout_correction tis | mis, see rollout_correction; w = 1 for none) of
    the engine's log-probs `rollout_logp` [B, T] on the tokens `rollout_mask` [B, T] (the on-policy tokens
    the engine gave log-probs for); it weights the surrogate only, as verl does, not the KL penalty.
    Returns (loss 0-dim tensor, metrics of python floats):
      pg_loss, kl_penalty  aggregated like the loss (same mode / normalizer, so loss = pg_loss +
                           kl_coef·kl_penalty and micro-batch values add up); kl_penalty is reported
                           whenever ref_logp is given, else 0
      clipfrac, clipfrac_low, clipfrac_high, dualclip_frac, ratio_mean (masked token means),
      uncertain_frac, clipfrac_and_uncertain (masked token means; uncertain: πθold < 0.9,
      see clipped_surrogate),
      ppo_kl               masked token mean of log πθold − log πθ.
    """
    kl_coef, kl_estimator, loss_agg, clamp = cfg.kl_coef, cfg.kl_estimator, cfg.loss_agg, cfg.clamp
    if kl_coef != 0.0 and ref_logp is None:
        raise ValueError("policy_loss with kl_coef != 0 needs ref_logp")
    ratio, el, eh = ratio_and_clip_range(cfg.ratio_variant, logp, old_logp, ref_logp=ref_logp,
                                         alpha=cfg.alpha, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                                         is_anchor=is_anchor, clamp=clamp)
    pg, stats = clipped_surrogate(ratio, advantages, mask, el, eh, dual_clip_c=cfg.dual_clip_c,
                                  uncertain=old_logp.detach() < UNCERTAIN_LOGP)
    if cfg.rollout_correction != "none":
        if rollout_logp is None or rollout_mask is None:
            raise ValueError(f"policy_loss with rollout correction {cfg.rollout_correction!r} needs "
                             "rollout_logp and rollout_mask")
        m = _mask_like(rollout_mask, pg) * _mask_like(mask, pg)
        w, _, _ = rollout_correction(old_logp, rollout_logp, m, cfg.rollout_correction, cfg.rollout_threshold,
                                     cfg.rollout_threshold_lower, cfg.rollout_level, clamp)
        pg = pg * w
    pg_loss = aggregate_loss(pg, mask, loss_agg, normalizer)
    if kl_coef != 0.0:
        kl = aggregate_loss(kl_penalty(logp, ref_logp, kl_estimator, clamp=clamp), mask, loss_agg, normalizer)
        loss = pg_loss + kl_coef * kl
    else:
        loss = pg_loss
        if ref_logp is not None:
            with torch.no_grad():
                kl = aggregate_loss(kl_penalty(logp, ref_logp, kl_estimator, clamp=clamp), mask, loss_agg,
                                    normalizer)
        else:
            kl = torch.zeros(())
    with torch.no_grad():
        metrics = {
            "pg_loss": float(pg_loss.detach()),
            "kl_penalty": float(kl.detach()),
            **{k: float(v) for k, v in stats.items()},
            "ratio_mean": float(masked_mean(ratio.detach(), mask)),
            "ppo_kl": float(masked_mean((old_logp - logp).detach(), mask)),
        }
    return loss, metrics
