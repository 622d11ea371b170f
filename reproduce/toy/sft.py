"""Supervised pretraining of the toy base model on a mixture of strategies (see task.py).

Deterministic from a seed: a fixed number of steps, data drawn from a seeded ``random.Random`` stream,
``torch.manual_seed`` for the initialization, and a fixed thread count (``SFTConfig.threads``; results are
bit-identical only for the same thread count and torch build). The thread count is restored afterwards.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass

import torch

from . import task as T


@dataclass(frozen=True)
class SFTConfig:
    steps: int = 400
    batch_size: int = 128
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    beta2: float = 0.98
    threads: int = 1  # fixed for determinism (bit-identical results need the same count)

    def to_dict(self) -> dict:
        return asdict(self)


QUICK_SFT = SFTConfig(steps=200, batch_size=64, warmup=10)  # ~40 s: learns the format and some arithmetic


def _strategy_sampler(mix: dict, rng: random.Random):
    names = [k for k, v in mix.items() if v > 0]
    weights = [mix[k] for k in names]
    return lambda: rng.choices(names, weights)[0]


def make_batch(tok, task_cfg: T.TaskConfig, rng: random.Random, n: int, exclude: set[str]):
    """n (prompt, response) examples rendered with the chat template; loss mask on the response + eos."""
    pick = _strategy_sampler(task_cfg.mix, rng)
    seqs, masks = [], []
    for _ in range(n):
        while True:
            operands, ops = T.sample_prompt(rng, task_cfg)
            problem = T.problem_text(operands, ops)
            if problem not in exclude:
                break
        resp = T.render(problem, pick(), rng, slip=task_cfg.slip, p_correct_borrow=task_cfg.p_correct_borrow)
        p_ids = tok.apply_chat_template([{"role": "user", "content": problem}], add_generation_prompt=True,
                                        tokenize=True, return_dict=True)["input_ids"]
        r_ids = tok(resp, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        seqs.append(p_ids + r_ids)
        masks.append([0] * len(p_ids) + [1] * len(r_ids))
    L = max(map(len, seqs))
    ids = torch.full((n, L), tok.pad_token_id, dtype=torch.long)
    lm = torch.zeros((n, L), dtype=torch.bool)
    att = torch.zeros((n, L), dtype=torch.long)
    for i, (s, m) in enumerate(zip(seqs, masks)):  # right padding for training
        ids[i, : len(s)] = torch.tensor(s)
        lm[i, : len(m)] = torch.tensor(m, dtype=torch.bool)
        att[i, : len(s)] = 1
    return ids, att, lm


def sft(model, tok, task_cfg: T.TaskConfig, cfg: SFTConfig, seed: int = 0, exclude: set[str] | None = None,
        log_every: int = 100, log=None) -> dict:
    exclude = exclude or set()
    log = log or (lambda msg: print(msg, flush=True))
    old_threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        torch.manual_seed(seed)
        rng = random.Random(f"toy-sft-{seed}")
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                                betas=(0.9, cfg.beta2))

        def lr_at(step):
            if step < cfg.warmup:
                return cfg.lr * (step + 1) / cfg.warmup
            frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
            return cfg.lr * 0.5 * (1 + math.cos(math.pi * frac))

        model.train()
        t0 = time.time()
        losses = []
        for step in range(cfg.steps):
            ids, att, lm = make_batch(tok, task_cfg, rng, cfg.batch_size, exclude)
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
            tgt = ids[:, 1:]
            m = lm[:, 1:]
            loss = torch.nn.functional.cross_entropy(logits[m], tgt[m])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            losses.append(loss.item())
            if log and (step % log_every == 0 or step == cfg.steps - 1):
                log(f"[sft] step {step:5d} loss {loss.item():.4f} lr {lr_at(step):.2e} "
                    f"{time.time() - t0:.1f}s")
        model.eval()
        tail = losses[-max(1, len(losses) // 10):]
        return {"steps": cfg.steps, "final_loss": sum(tail) / len(tail),
                "seconds": round(time.time() - t0, 1), "threads": cfg.threads}
    finally:
        torch.set_num_threads(old_threads)
