"""The toy world's model: a tiny Qwen2ForCausalLM (~160K parameters), plus a small KV-cache sampler used by
the world's acceptance checks (and usable by anyone who wants cheap CPU generation from a toy checkpoint)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


@dataclass(frozen=True)
class ModelConfig:
    hidden_size: int = 64
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    intermediate_size: int = 192
    max_position_embeddings: int = 128
    rope_theta: float = 10000.0
    # HF's default 0.02 leaves this tiny model on a long loss plateau (arithmetic not learned in 1000 SFT
    # steps); 0.1 learns it in ~200.
    initializer_range: float = 0.1

    def to_dict(self) -> dict:
        return asdict(self)


def build_model(tok, cfg: ModelConfig = ModelConfig(), seed: int = 0) -> Qwen2ForCausalLM:
    qcfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=True,
        initializer_range=cfg.initializer_range,
        use_sliding_window=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(qcfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def sample(
    model,
    prompts: list[list[int]],
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Sample one continuation per prompt. Returns token ids; a continuation that stopped ends with eos.
    Prompts are left-padded (position ids follow the mask); temperature 0 = greedy."""
    from transformers import DynamicCache

    from common.rollout.static_decode import cache_arg, check_cache_filled

    B = len(prompts)
    L = max(len(p) for p in prompts)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    mask = torch.zeros((B, L), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, L - len(p):] = torch.tensor(p)
        mask[i, L - len(p):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    cache_kw = {cache_arg(model): cache}   # `cache` from transformers 5.24, `past_key_values` before
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **cache_kw)
    check_cache_filled(cache, L)
    logits = out.logits[:, -1, :]
    cur_pos = pos[:, -1]
    done = torch.zeros(B, dtype=torch.bool)
    gen = torch.full((B, max_new_tokens), pad_id, dtype=torch.long)
    for t in range(max_new_tokens):
        if temperature <= 0:
            nxt = logits.argmax(-1)
        else:
            probs = torch.softmax(logits.float() / temperature, -1)
            if top_p < 1.0:
                sp, si = probs.sort(-1, descending=True)
                keep = (sp.cumsum(-1) - sp) < top_p
                sp = sp * keep
                probs = torch.zeros_like(probs).scatter(-1, si, sp)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        gen[:, t] = nxt
        done = done | (nxt == eos_id)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        mask = torch.cat([mask, torch.ones((B, 1), dtype=torch.long)], 1)
        cur_pos = cur_pos + 1
        out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=cur_pos[:, None],
                    use_cache=True, **cache_kw)
        logits = out.logits[:, -1, :]
    res = []
    for i in range(B):
        row = gen[i].tolist()
        if eos_id in row:
            row = row[: row.index(eos_id) + 1]
        else:
            row = [x for x in row if x != pad_id]
        res.append(row)
    return res
