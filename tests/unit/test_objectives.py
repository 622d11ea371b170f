import math

import pytest
import torch

from armor.objectives import (LossConfig, aggregate_loss, clipped_surrogate, importance_ratio,
                              kl_forward_estimate, kl_penalty, kl_reverse_estimate, log_ratio, masked_mean,
                              masked_sum, mixed_log_prob, mixed_ratio, mopd_token_advantages,
                              opd_token_advantages, policy_loss, ratio_and_clip_range)

L = math.log


def close(a, b, atol=1e-6):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32),
                          atol=atol, rtol=1e-5)


# ----------------------------------------------------------------------------- masking

def test_masked_sum_mean_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, float("inf")]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    assert masked_sum(x, m) == 7.0                       # 1 + 2 + 4 (inf masked out, not NaN)
    assert masked_mean(x, m) == 7.0 / 3.0
    assert torch.equal(masked_sum(x, m, dim=-1), torch.tensor([3.0, 4.0]))
    assert torch.equal(masked_mean(x, m, dim=-1), torch.tensor([1.5, 4.0]))
    # col 3 all masked -> 0
    assert torch.equal(masked_mean(x, m.float(), dim=0), torch.tensor([2.5, 2.0, 0.0]))
    z = torch.zeros(2, 3)
    assert masked_mean(x, z) == 0.0 and masked_sum(x, z) == 0.0


# ----------------------------------------------------------------------------- ratios

def test_log_ratio_and_importance_ratio():
    lp = torch.tensor([L(0.5), -80.0, 0.0])
    old = torch.tensor([L(0.25), 0.0, -80.0])
    assert close(log_ratio(lp, old), [L(2.0), -20.0, 20.0])      # clamped to ±20
    assert close(importance_ratio(lp, old), [2.0, math.exp(-20), math.exp(20)])
    assert close(log_ratio(lp, old, clamp=5.0), [L(2.0), -5.0, 5.0])


def test_mixed_log_prob_by_hand():
    lp = torch.tensor([L(0.2)])
    ref = torch.tensor([L(0.6)])
    assert mixed_log_prob(lp, ref, 1.0) is lp                    # α = 1: logp itself
    assert mixed_log_prob(lp, None, 1.0) is lp
    assert close(mixed_log_prob(lp, ref, 0.5), [L(0.4)])         # .5*.2 + .5*.6 = .4
    assert close(mixed_log_prob(lp, ref, 0.75), [L(0.3)])        # .75*.2 + .25*.6 = .15 + .15 = .3
    with pytest.raises(ValueError):
        mixed_log_prob(lp, ref, 0.0)
    with pytest.raises(ValueError):
        mixed_log_prob(lp, None, 0.5)


def test_mixed_ratio_by_hand():
    # α = .8, πθ = .5, πold = .25, πref = .5: (.4 + .1) / (.2 + .1) = 5/3
    r = mixed_ratio(torch.tensor([L(0.5)]), torch.tensor([L(0.25)]), torch.tensor([L(0.5)]), 0.8)
    assert close(r, [5 / 3])
    lp, old = torch.tensor([-1.3, -0.2]), torch.tensor([-0.7, -2.0])
    assert torch.equal(mixed_ratio(lp, old, None, 1.0), importance_ratio(lp, old))


def test_mixed_ratio_with_ref_equal_old_is_affine():
    g = torch.Generator().manual_seed(0)
    lp = -3 * torch.rand(4, 6, generator=g)
    old = -3 * torch.rand(4, 6, generator=g)
    for a in (0.9375, 0.875, 0.5):
        assert torch.allclose(mixed_ratio(lp, old, old, a), a * importance_ratio(lp, old) + (1 - a),
                              atol=1e-6, rtol=1e-5)


def test_ratio_and_clip_range_variants():
    lp = torch.tensor([[L(0.5), L(0.5)], [L(0.5), L(0.5)]])
    old = torch.full((2, 2), L(0.25))
    ref = torch.full((2, 2), L(0.4))
    r, el, eh = ratio_and_clip_range("plain", lp, old)
    assert close(r, torch.full((2, 2), 2.0)) and (el, eh) == (0.2, 0.28)
    r, el, eh = ratio_and_clip_range("mixed", lp, old, ref, alpha=0.5)
    assert close(r, torch.full((2, 2), 0.45 / 0.325)) and (el, eh) == (0.2, 0.28)   # (.25+.2)/(.125+.2)
    r, el, eh = ratio_and_clip_range("static_clip", lp, old, alpha=0.8)
    assert close(r, torch.full((2, 2), 2.0)) and close(el, 0.25) and close(eh, 0.35)  # .2/.8, .28/.8
    # off-policy anchor: row 1 is an anchor -> πθ/πref = .5/.4 = 1.25 there
    r, el, eh = ratio_and_clip_range("offpolicy_anchor", lp, old, ref, is_anchor=torch.tensor([False, True]))
    assert close(r, [[2.0, 2.0], [1.25, 1.25]]) and (el, eh) == (0.2, 0.28)
    r, _, _ = ratio_and_clip_range("offpolicy_anchor", lp, old, ref,
                                   is_anchor=torch.tensor([[False, True], [False, False]]))
    assert close(r, [[2.0, 1.25], [2.0, 2.0]])
    with pytest.raises(ValueError, match="nope"):
        ratio_and_clip_range("nope", lp, old)
    with pytest.raises(ValueError):
        ratio_and_clip_range("mixed", lp, old, None, alpha=0.5)
    with pytest.raises(ValueError):
        ratio_and_clip_range("offpolicy_anchor", lp, old, ref)


# ----------------------------------------------------------------------------- surrogate

RATIOS = torch.tensor([[0.5, 1.0, 1.5, 3.0], [0.5, 1.0, 1.5, 3.0]])


def test_clipped_surrogate_by_hand():
    adv = torch.tensor([1.0, -1.0])                       # [B], broadcast over tokens
    mask = torch.ones(2, 4)
    loss, st = clipped_surrogate(RATIOS, adv, mask, 0.2, 0.28)
    # A=+1: -min(r, clip(r, .8, 1.28)): .5 -> -.5 ; 1 -> -1 ; 1.5 -> -1.28 ; 3 -> -1.28
    # A=-1:  max(r, clip(r)):            .5 -> .8  ; 1 -> 1  ; 1.5 -> 1.5   ; 3 -> 3
    assert close(loss, [[-0.5, -1.0, -1.28, -1.28], [0.8, 1.0, 1.5, 3.0]])
    # clipped active: (A>0, r=1.5), (A>0, r=3), (A<0, r=.5) -> 3/8 ; low 1/8 ; high 2/8
    assert (close(st["clipfrac"], 3 / 8) and close(st["clipfrac_low"], 1 / 8)
            and close(st["clipfrac_high"], 2 / 8))
    assert st["dualclip_frac"] == 0
    # [B, T] advantages give the same
    loss2, _ = clipped_surrogate(RATIOS, adv[:, None].expand(2, 4), mask, 0.2, 0.28)
    assert torch.equal(loss, loss2)


def test_clip_share_among_uncertain_tokens_by_hand():
    adv = torch.tensor([1.0, -1.0])
    # clipped: (0,2), (0,3), (1,0); uncertain: (0,0), (0,3), (1,0), (1,1); the masked token (1,3) never counts
    unc = torch.tensor([[True, False, False, True], [True, True, False, True]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    _, st = clipped_surrogate(RATIOS, adv, mask, 0.2, 0.28, uncertain=unc)
    assert close(st["uncertain_frac"], 4 / 7) and close(st["clipfrac_and_uncertain"], 2 / 7)
    assert close(st["clipfrac"], 3 / 7)                    # unchanged by the extra statistics
    _, st = clipped_surrogate(RATIOS, adv, mask, 0.2, 0.28)
    assert "uncertain_frac" not in st
    # policy_loss marks a token uncertain when its old probability is below 0.9
    old = torch.log(torch.tensor([[0.95, 0.5, 0.89, 0.91]]))
    logp = old + torch.log(torch.tensor([[1.0, 1.5, 1.0, 1.5]]))     # ratios 1, 1.5, 1, 1.5
    _, m = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 4))
    assert close(m["uncertain_frac"], 2 / 4) and close(m["clipfrac_and_uncertain"], 1 / 4)
    assert close(m["clipfrac"], 2 / 4)


def test_dual_clip_by_hand():
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    loss, st = clipped_surrogate(RATIOS, adv, torch.ones(2, 4), 0.2, 0.28, dual_clip_c=2.0)
    # A<0 row: min(max(r, clip r), -c*A = 2): .8, 1, 1.5, min(3, 2) = 2 ; A>0 row unchanged
    assert close(loss, [[-0.5, -1.0, -1.28, -1.28], [0.8, 1.0, 1.5, 2.0]])
    assert close(st["dualclip_frac"], 1 / 8)
    loss, st = clipped_surrogate(RATIOS, adv, mask, 0.2, 0.28, dual_clip_c=2.0)
    assert loss[1, 3] == 0 and st["dualclip_frac"] == 0    # the dual-clipped token is masked out
    assert close(st["clipfrac"], 3 / 7)
    # gradient: dual-clipped token (A<0, r=3 > c) has zero gradient; without dual clip it is -A = 1
    for c, want in ((2.0, 0.0), (None, 1.0)):
        r = torch.tensor([[3.0]], requires_grad=True)
        l, _ = clipped_surrogate(r, torch.tensor([-1.0]), torch.ones(1, 1), 0.2, 0.28, dual_clip_c=c)
        l.sum().backward()
        assert r.grad.item() == want
    with pytest.raises(ValueError):
        clipped_surrogate(RATIOS, adv, mask, 0.2, 0.28, dual_clip_c=1.0)


# ----------------------------------------------------------------------------- aggregation

def test_aggregate_modes_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [9.0, 9.0, 9.0, 9.0]])
    m = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])   # row 3 fully padded
    assert aggregate_loss(x, m, "token-mean") == 2.5                 # (1+2+3+4)/4
    assert aggregate_loss(x, m, "seq-mean-token-mean") == 3.0        # (6/3 + 4/1) / 2 non-empty rows
    assert aggregate_loss(x, m, "seq-mean-token-sum") == 5.0         # (6 + 4) / 2
    assert aggregate_loss(x, m, "token-mean", normalizer=10) == 1.0  # 10 / 10
    assert aggregate_loss(x, m, "seq-mean-token-sum", normalizer=4) == 2.5
    assert aggregate_loss(x, torch.zeros(3, 4), "seq-mean-token-mean") == 0.0
    assert aggregate_loss(x, torch.zeros(3, 4), "token-mean") == 0.0
    with pytest.raises(ValueError, match="seq-sum"):
        aggregate_loss(x, m, "seq-sum")


def _batch(seed=0, B=6, T=7):
    g = torch.Generator().manual_seed(seed)
    lp = -2 * torch.rand(B, T, generator=g)
    old = lp + 0.3 * torch.randn(B, T, generator=g)
    ref = lp + 0.3 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    mask = (torch.rand(B, T, generator=g) > 0.3).float()
    mask[:, 0] = 1
    mask[-1] = 0                                                      # one fully padded row
    return lp, old, ref, adv, mask


def test_token_mean_normalizer_micro_batches_add_up():
    lp, old, ref, adv, mask = _batch()
    cfg = LossConfig(ratio_variant="mixed", alpha=0.9, eps_low=0.2, eps_high=0.28, dual_clip_c=10.0,
                     kl_coef=0.1)
    lp_full = lp.clone().requires_grad_(True)
    full, _ = policy_loss(lp_full, old, adv, mask, cfg, ref_logp=ref)
    full.backward()
    n = mask.sum()
    lp_mb = lp.clone().requires_grad_(True)
    total = 0.0
    for sl in (slice(0, 2), slice(2, 6)):
        part, _ = policy_loss(lp_mb[sl], old[sl], adv[sl], mask[sl], cfg, ref_logp=ref[sl], normalizer=n)
        part.backward()
        total = total + part.detach()
    assert torch.allclose(total, full.detach(), atol=1e-6)
    assert torch.allclose(lp_mb.grad, lp_full.grad, atol=1e-7)
    # and directly on aggregate_loss
    x = torch.randn(6, 7)
    a = (aggregate_loss(x[:2], mask[:2], "token-mean", normalizer=n)
         + aggregate_loss(x[2:], mask[2:], "token-mean", normalizer=n))
    assert torch.allclose(a, aggregate_loss(x, mask, "token-mean"), atol=1e-6)


# ----------------------------------------------------------------------------- KL

def test_kl_penalty_by_hand():
    lp, ref = torch.tensor([L(0.5)]), torch.tensor([L(0.25)])
    # log ρ = log(.25/.5) = -log 2
    assert close(kl_penalty(lp, ref, "k1"), [L(2)])                    # 0.6931
    assert close(kl_penalty(lp, ref, "k2"), [0.5 * L(2) ** 2])         # 0.2402
    assert close(kl_penalty(lp, ref, "k3"), [0.5 + L(2) - 1])          # ρ - log ρ - 1 = 0.1931
    assert torch.equal(kl_penalty(lp, ref, "low_var_kl"), kl_penalty(lp, ref, "k3"))
    assert torch.equal(kl_penalty(lp, ref, "mse"), kl_penalty(lp, ref, "k2"))
    # clamps: log ρ = 80 -> 20: e^20 - 21 ; verl value clamp at 10 by default
    big = kl_penalty(torch.tensor([-80.0]), torch.tensor([0.0]), "k3", value_clamp=None)
    assert close(big, [math.exp(20) - 21], atol=1e3)
    assert kl_penalty(torch.tensor([-80.0]), torch.tensor([0.0]), "k3") == 10.0
    with pytest.raises(ValueError, match="k4"):
        kl_penalty(lp, ref, "k4")


def test_k3_nonnegative_zero_iff_equal():
    v = torch.linspace(-80, 0, 41)
    lp, ref = torch.meshgrid(v, v, indexing="ij")
    k3 = kl_penalty(lp, ref, "k3", value_clamp=None)
    assert torch.isfinite(k3).all() and (k3 >= 0).all()
    eq = lp == ref
    assert (k3[eq] == 0).all() and (k3[~eq] > 0).all()


def _categoricals():
    # two "positions" with different conditional distributions over 5 tokens
    p = torch.tensor([[0.1, 0.2, 0.3, 0.25, 0.15], [0.6, 0.1, 0.1, 0.1, 0.1]])   # πθ
    q = torch.tensor([[0.3, 0.3, 0.1, 0.2, 0.1], [0.2, 0.2, 0.2, 0.2, 0.2]])     # πref
    return p, q


def test_kl_estimates_exact_expectation():
    p, q = _categoricals()
    rev = (p * (p / q).log()).sum(-1)       # exact KL(πθ‖πref) per position
    fwd = (q * (q / p).log()).sum(-1)       # exact KL(πref‖πθ) per position
    # weighting every token y by πθ(y) (float mask) makes the masked mean the exact E_{y~πθ}
    for i in range(2):
        assert close(kl_reverse_estimate(p[i:i + 1].log(), q[i:i + 1].log(), p[i:i + 1]), rev[i])
        assert close(kl_forward_estimate(p[i:i + 1].log(), q[i:i + 1].log(), p[i:i + 1]), fwd[i])
    # both positions together: token average of the per-position KLs (Σ_pos Σ_y p k / Σ p = mean)
    assert close(kl_reverse_estimate(p.log(), q.log(), p), rev.mean())
    assert close(kl_forward_estimate(p.log(), q.log(), p), fwd.mean())
    # forward and reverse differ here, so the test tells them apart
    assert (rev - fwd).abs().max() > 0.04          # 0.3819 vs 0.3348 at position 2


def test_kl_estimates_monte_carlo():
    p, q = _categoricals()
    g = torch.Generator().manual_seed(0)
    n = 200_000
    y = torch.multinomial(p, n, replacement=True, generator=g)          # [2, n] samples from πθ
    lp, lr = p.log().gather(1, y), q.log().gather(1, y)
    mask = torch.ones(2, n)
    rev = (p * (p / q).log()).sum(-1).mean()
    fwd = (q * (q / p).log()).sum(-1).mean()
    assert abs(kl_reverse_estimate(lp, lr, mask) - rev) < 0.01
    assert abs(kl_forward_estimate(lp, lr, mask) - fwd) < 0.01
    mask[:, 1000:] = 0
    assert torch.isfinite(kl_forward_estimate(lp, lr, mask))


def test_kl_estimates_zero_when_equal_and_padding():
    lp = torch.tensor([[-1.0, -2.0, -80.0], [0.0, 0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    assert kl_reverse_estimate(lp, lp, m) == 0 and kl_forward_estimate(lp, lp, m) == 0
    assert kl_reverse_estimate(lp, lp - 1, torch.zeros(2, 3)) == 0


# ----------------------------------------------------------------------------- distillation

def test_opd_mopd_by_hand():
    t = torch.tensor([[L(0.5), L(0.2), 0.0]])
    s = torch.tensor([[L(0.25), L(0.4), -5.0]], requires_grad=True)
    m = torch.tensor([[1.0, 1.0, 0.0]])
    a = opd_token_advantages(t, s, m)
    assert close(a, [[L(2), -L(2), 0.0]]) and not a.requires_grad      # log(.5/.25), log(.2/.4), masked
    b = mopd_token_advantages(torch.tensor([0.5]), t, s, m, coef=2.0)
    assert close(b, [[0.5 + 2 * L(2), 0.5 - 2 * L(2), 0.0]])
    b2 = mopd_token_advantages(torch.tensor([[0.5, 0.5, 0.5]]), t, s, m, coef=2.0)
    assert torch.equal(b, b2)


# ----------------------------------------------------------------------------- policy_loss

def test_policy_loss_by_hand_and_metrics():
    lp = torch.tensor([[L(0.5), L(0.5)]])
    old = torch.tensor([[L(0.25), L(0.5)]])
    ref = torch.tensor([[L(0.25), L(0.5)]])
    adv = torch.tensor([1.0])
    loss, met = policy_loss(lp, old, adv, torch.ones(1, 2), LossConfig(kl_coef=0.5, kl_estimator="k3"),
                            ref_logp=ref)
    # ratios [2, 1] -> pg [-1.28, -1] -> mean -1.14 ; k3 [0.1931, 0] -> mean 0.09657 ; loss -1.14 + .5*.09657
    k3 = (0.5 + L(2) - 1) / 2
    assert close(met["pg_loss"], -1.14) and close(met["kl_penalty"], k3)
    assert close(loss, -1.14 + 0.5 * k3)
    assert close(met["ratio_mean"], 1.5) and close(met["clipfrac"], 0.5) and close(met["clipfrac_high"], 0.5)
    assert close(met["ppo_kl"], -L(2) / 2)
    assert set(met) >= {"pg_loss", "kl_penalty", "clipfrac", "clipfrac_low", "clipfrac_high", "dualclip_frac",
                        "ratio_mean"}
    assert all(isinstance(v, float) for v in met.values())
    with pytest.raises(ValueError):
        policy_loss(lp, old, adv, torch.ones(1, 2), LossConfig(kl_coef=0.1))


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_alpha_one_reproduces_dapo_exactly(agg):
    lp, old, ref, adv, mask = _batch(seed=1)
    outs = []
    for variant, a in (("plain", 1.0), ("mixed", 1.0)):
        x = lp.clone().requires_grad_(True)
        loss, met = policy_loss(x, old, adv, mask,
                                LossConfig(ratio_variant=variant, alpha=a, dual_clip_c=10.0,
                                                               loss_agg=agg), ref_logp=ref)
        loss.backward()
        outs.append((loss.detach(), x.grad, met))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert outs[0][2] == outs[1][2]
    # and static clip at α = 1 is the plain loss too
    loss_s, _ = policy_loss(lp, old, adv, mask,
                            LossConfig(ratio_variant="static_clip", alpha=1.0, dual_clip_c=10.0,
                                                           loss_agg=agg))
    assert torch.equal(loss_s, outs[0][0])


def _grad_wrt_logp(p, p_old, p_ref, adv, variant, alpha, eps_low=0.2, eps_high=0.28):
    lp = torch.tensor(p, dtype=torch.float64).log().requires_grad_(True)
    old = torch.tensor(p_old, dtype=torch.float64).log()
    ref = torch.tensor(p_ref, dtype=torch.float64).log()
    r, el, eh = ratio_and_clip_range(variant, lp, old, ref, alpha=alpha, eps_low=eps_low, eps_high=eps_high)
    loss, _ = clipped_surrogate(r, torch.tensor(adv, dtype=torch.float64), torch.ones_like(lp), el, eh,
                                dual_clip_c=10.0)
    loss.sum().backward()
    return r.detach(), lp.grad


def test_mixed_trust_region_gradients():
    a, el, eh = 0.8, 0.2, 0.28
    po, pr = 0.3, 0.5
    # r_mix = 1 ± ε  <=>  πθ = (1 ± ε)·πold ± ε(1−α)/α·πref
    up = (1 + eh) * po + eh * (1 - a) / a * pr          # 1.28*.3 + .28*.25*.5 = .384 + .035 = .419
    lo = (1 - el) * po - el * (1 - a) / a * pr          # .8*.3 - .2*.25*.5 = .24 - .025 = .215
    assert abs(up - 0.419) < 1e-12 and abs(lo - 0.215) < 1e-12
    d = 0.005
    # one token per column: [above upper (A>0), inside near upper (A>0), below lower (A<0), inside near lower
    # (A<0)]
    p = [[up + d, up - d, lo - d, lo + d]]
    adv = [[1.0, 1.0, -1.0, -1.0]]
    r, g = _grad_wrt_logp(p, [[po] * 4], [[pr] * 4], adv, "mixed", a)
    # the bounds are exactly where r_mix hits 1 ± ε
    rb, _ = _grad_wrt_logp([[up, lo]], [[po] * 2], [[pr] * 2], [[1.0, -1.0]], "mixed", a)
    assert torch.allclose(rb, torch.tensor([[1 + eh, 1 - el]], dtype=torch.float64), atol=1e-12)
    assert g[0, 0] == 0 and g[0, 2] == 0                    # outside the region: exactly zero
    assert g[0, 1] < 0 and g[0, 3] > 0                      # inside: pushes πθ up (A>0) / down (A<0)
    # d loss/d logp inside = -A·r_mix·απθ/(απθ+(1−α)πref): check the A>0 value
    pi = up - d
    want = -(a * pi + (1 - a) * pr) / (a * po + (1 - a) * pr) * a * pi / (a * pi + (1 - a) * pr)
    assert torch.allclose(g[0, 1], torch.tensor(want, dtype=torch.float64))
    # the same two inside points are already clipped by the plain ratio (.414 > .384, .22 < .24)
    _, gp = _grad_wrt_logp(p, [[po] * 4], [[pr] * 4], adv, "plain", 1.0)
    assert gp[0, 1] == 0 and gp[0, 3] == 0
    # and on the other sides the gradient does not vanish (A>0 below the lower bound, A<0 above the upper)
    _, g2 = _grad_wrt_logp([[lo - d, up + d]], [[po] * 2], [[pr] * 2], [[1.0, -1.0]], "mixed", a)
    assert g2[0, 0] != 0 and g2[0, 1] != 0


def test_no_nan_extreme_logprobs_and_padded_rows():
    B, T = 3, 4
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    cases = [(-80.0, 0.0, 0.0), (0.0, -80.0, -80.0), (-80.0, -80.0, 0.0), (-80.0, 0.0, -80.0),
             (-80.0, -80.0, -80.0)]
    for lpv, oldv, refv in cases:
        for variant in ("plain", "mixed", "static_clip", "offpolicy_anchor"):
            for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
                for est in ("k1", "k2", "k3"):
                    lp = torch.full((B, T), lpv, requires_grad=True)
                    cfg = LossConfig(ratio_variant=variant, alpha=0.875, dual_clip_c=10.0, loss_agg=agg,
                                     kl_coef=0.1, kl_estimator=est)
                    loss, met = policy_loss(lp, torch.full((B, T), oldv), torch.tensor([1.0, -1.0, 0.5]),
                                            mask, cfg, ref_logp=torch.full((B, T), refv),
                                            is_anchor=torch.tensor([False, True, False]))
                    loss.backward()
                    assert torch.isfinite(loss), (lpv, oldv, refv, variant, agg, est)
                    assert torch.isfinite(lp.grad).all(), (lpv, oldv, refv, variant, agg, est)
                    assert (lp.grad[2] == 0).all() and (lp.grad[0, 3] == 0)
                    assert all(math.isfinite(v) for v in met.values())
        lp = torch.full((B, T), lpv)
        ref = torch.full((B, T), refv)
        assert (torch.isfinite(kl_reverse_estimate(lp, ref, mask))
                and torch.isfinite(kl_forward_estimate(lp, ref, mask)))
        assert torch.isfinite(mixed_log_prob(lp, ref, 0.5)).all()
    # an all-padding batch gives loss 0 and zero gradients
    lp = torch.full((B, T), -80.0, requires_grad=True)
    loss, _ = policy_loss(lp, torch.zeros(B, T), torch.ones(B), torch.zeros(B, T), LossConfig(kl_coef=1.0),
                          ref_logp=torch.zeros(B, T))
    loss.backward()
    assert loss == 0 and (lp.grad == 0).all()


# ----------------------------------------------------------------------------- training/inference mismatch

def test_logprob_mismatch_by_hand():
    """mean |log π_engine − log π_trainer| over the masked (on-policy, sampled) tokens;
    padding and -inf ignored."""
    from armor.objectives import logprob_mismatch, pad_token_values
    eng, have = pad_token_values([[-1.0, -2.0], [-0.5], [-0.25, -0.5, -0.75, -1.0]], 3)
    assert eng.tolist() == [[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0], [-0.25, -0.5, -0.75]]     # the last row cut
    assert have.tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1]]
    trainer = torch.tensor([[-1.5, -1.0, float("-inf")], [-0.5, -3.0, 0.0], [-0.25, -0.5, -0.5]])
    on_policy = torch.tensor([1.0, 1.0, 0.0])[:, None]          # row 2 is an anchor: not compared
    # |−1 − (−1.5)| = 0.5, |−2 − (−1)| = 1, |−0.5 − (−0.5)| = 0  ->  1.5 / 3
    assert logprob_mismatch(eng, trainer, have * on_policy) == 0.5
    assert logprob_mismatch(eng, eng, have) == 0.0
    assert logprob_mismatch(eng, trainer, torch.zeros_like(have)) == 0.0   # no token: 0, not NaN


# ----------------------------------------------------------------------------- rollout correction

def _rc(*args, **kw):
    from armor.objectives import rollout_correction
    return rollout_correction(*args, **kw)


def test_token_tis_and_mis_by_hand():
    """ρ = πθold/π_rollout = .5/.25, .3/.3, .2/.4 = 2, 1, .5 (a 4th token masked, -inf there); C = 1.5."""
    old = torch.tensor([[L(0.5), L(0.3), L(0.2), 0.0]])
    eng = torch.tensor([[L(0.25), L(0.3), L(0.4), float("-inf")]])
    m = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w, rho, cut = _rc(old, eng, m, "tis", 1.5)
    assert close(rho, [[2.0, 1.0, 0.5, 1.0]]) and close(w, [[1.5, 1.0, 0.5, 1.0]])     # min(ρ, C)
    assert cut.tolist() == [[True, False, False, False]]
    w, _, cut = _rc(old, eng, m, "mis", 1.5)                  # kept in [1/1.5, 1.5] = [.667, 1.5]: ρ itself
    assert close(w, [[0.0, 1.0, 0.0, 1.0]]) and cut.tolist() == [[True, False, True, False]]
    w, _, cut = _rc(old, eng, m, "mis", 1.5, threshold_lower=0.0)        # upper bound only
    assert close(w, [[0.0, 1.0, 0.5, 1.0]]) and cut.tolist() == [[True, False, False, False]]
    w, _, cut = _rc(old, eng, m, "mis", 2.5, threshold_lower=0.4)        # all inside [.4, 2.5]: w = ρ
    assert close(w, [[2.0, 1.0, 0.5, 1.0]]) and not cut.any()
    w, _, cut = _rc(old, eng, m, "none")
    assert torch.equal(w, torch.ones(1, 4)) and not cut.any()
    w, rho, _ = _rc(old.clone().requires_grad_(True), eng, m, "tis", 1.5)     # a constant: no gradient
    assert not w.requires_grad and not rho.requires_grad


def test_sequence_level_by_hand():
    """Row 0: ρ_t = 2, 1.5 -> ρ_seq = 3 (its padding ignored); row 1: .5, .8 -> .4; every token of a row gets
    the row's weight."""
    old = torch.tensor([[L(0.5), L(0.3), -1.0], [L(0.1), L(0.4), 0.0]])
    eng = torch.tensor([[L(0.25), L(0.2), 5.0], [L(0.2), L(0.5), 0.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    w, rho, cut = _rc(old, eng, m, "tis", 2.0, level="sequence")
    assert close(rho, [[3.0, 3.0, 1.0], [0.4, 0.4, 1.0]]) and close(w, [[2.0, 2.0, 1.0], [0.4, 0.4, 1.0]])
    assert cut.tolist() == [[True, True, False], [False, False, False]]
    w, _, cut = _rc(old, eng, m, "mis", 2.0, level="sequence")          # [.5, 2]: both rows out
    assert close(w, [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]) and cut.tolist() == [[True, True, False]] * 2
    w, _, _ = _rc(old, eng, m, "mis", 4.0, level="sequence")            # [.25, 4]: both rows in, w = ρ_seq
    assert close(w, [[3.0, 3.0, 1.0], [0.4, 0.4, 1.0]])
    from armor.objectives import rollout_log_ratio
    assert close(rollout_log_ratio(old, eng, m, "sequence", clamp=1.0),     # log 3 clamped to 1
                 [[1.0, 1.0, 0.0], [L(0.4), L(0.4), 0.0]])


def test_rollout_correction_is_one_when_engine_and_trainer_agree_and_refuses_bad_settings():
    lp = torch.log(torch.tensor([[0.9, 0.05, 0.3]]))
    for mode in ("tis", "mis"):
        for level in ("token", "sequence"):
            w, rho, cut = _rc(lp, lp.clone(), None, mode, 1.01, level=level)
            assert torch.equal(w, torch.ones(1, 3)) and torch.equal(rho, torch.ones(1, 3)) and not cut.any()
    for kw, msg in (({"mode": "is", "threshold": 2.0}, "mode must be one of"),
                    ({"mode": "tis", "threshold": None}, "needs a threshold C > 1, got None"),
                    ({"mode": "mis", "threshold": 1.0}, "needs a threshold C > 1, got 1.0"),
                    ({"mode": "tis", "threshold": 2.0, "threshold_lower": 0.5},
                     "applies to mode 'mis' only"),
                    ({"mode": "mis", "threshold": 2.0, "threshold_lower": 1.0},
                     r"in \[0, 1\), got 1.0"),
                    ({"mode": "tis", "threshold": 2.0, "level": "seq"}, "level must be one of")):
        with pytest.raises(ValueError, match=msg):
            _rc(lp, lp, None, **kw)


def test_policy_loss_weights_the_surrogate_by_the_rollout_correction():
    """θ = θold (r = 1), A = +1: L_t = −w_t, token-mean over 3 tokens. ρ = 2, 1, 1 (C = 1.5): tis w = 1.5, 1,
    1 -> −3.5/3; mis w = 0, 1, 1 -> −2/3 (the masked token stays in the count); d L / d logp_t = −w_t / 3 (w
    is a constant). The 3rd token is outside rollout_mask (an anchor's): w = 1 whatever its engine
    log-prob."""
    old = torch.tensor([[L(0.5), L(0.3), L(0.2)]])
    eng = torch.tensor([[L(0.25), L(0.3), L(0.01)]])
    mask, corr = torch.ones(1, 3), torch.tensor([[1.0, 1.0, 0.0]])
    adv = torch.ones(1)
    base_lp = old.clone().requires_grad_(True)
    base, _ = policy_loss(base_lp, old, adv, mask, LossConfig())
    assert close(base, -1.0)
    for mode, w, value in (("tis", [1.5, 1.0, 1.0], -3.5 / 3), ("mis", [0.0, 1.0, 1.0], -2.0 / 3)):
        lp = old.clone().requires_grad_(True)
        cfg = LossConfig(rollout_correction=mode, rollout_threshold=1.5)
        loss, metrics = policy_loss(lp, old, adv, mask, cfg, rollout_logp=eng, rollout_mask=corr)
        loss.backward()
        assert close(loss, value) and close(metrics["pg_loss"], value)
        assert close(lp.grad, [[-x / 3 for x in w]])
    # none: the engine's log-probs are not read; a mode without them is an error, not a silent no-op
    loss, _ = policy_loss(old, old, adv, mask, LossConfig(), rollout_logp=eng, rollout_mask=corr)
    assert torch.equal(loss, base.detach())
    with pytest.raises(ValueError, match="rollout correction 'tis' needs rollout_logp"):
        policy_loss(old, old, adv, mask, LossConfig(rollout_correction="tis", rollout_threshold=2.0))
