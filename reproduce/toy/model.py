"""The toy world's model: a tiny Qwen2ForCausalLM (~160K parameters), plus a small KV-cache sampler used by
the world's acceptance checks (and usable by anyone who wants cheap CPU generation from a toy checkpoint).

`ArchConfig` / `build_arch_model`: toy-width models of the paper models' families, for the tests that check
what the toy model's shape leaves out (untied lm_head, GQA, a vocabulary padded above the tokenizer's,
Qwen3's per-head q/k RMSNorm and explicit head_dim): QWEN2_ARCH (Qwen2.5-Math-7B's layout) and QWEN3_ARCH
(Qwen3-8B-Base's)."""
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


def _layout_kwargs(tok, cfg, vocab_size: int, tied: bool) -> dict:
    """The HF config fields of the toy model and of the paper-layout models (cfg: ModelConfig, ArchConfig)."""
    return dict(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=tied,
        initializer_range=cfg.initializer_range,
        use_sliding_window=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
        torch_dtype="float32",
    )


def build_model(tok, cfg: ModelConfig = ModelConfig(), seed: int = 0) -> Qwen2ForCausalLM:
    if isinstance(cfg, ArchConfig):                 # a paper family's layout (below)
        return build_arch_model(tok, cfg, seed)
    qcfg = Qwen2Config(**_layout_kwargs(tok, cfg, vocab_size=len(tok), tied=True))
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(qcfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model


@dataclass(frozen=True)
class ArchConfig:
    """A toy-width model of a paper model's family, with the layout details the toy ModelConfig leaves out.

    family: "qwen2" (head_dim = hidden_size / num_attention_heads, q/k/v biases: Qwen2.5-Math-7B) or "qwen3"
    (an explicit head_dim, per-head q/k RMSNorm, no biases: Qwen3-8B-Base). Both: an untied lm_head, GQA
    (num_key_value_heads < num_attention_heads) and a vocabulary padded to a multiple of vocab_multiple
    (Qwen's checkpoints: 151,936 / 152,064 rows for a 151,665-token tokenizer). Head widths are 32 (vLLM's
    CPU attention takes 32 to 512)."""
    family: str = "qwen2"
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int | None = None          # qwen3 only; qwen2's is hidden_size / num_attention_heads
    intermediate_size: int = 256
    vocab_multiple: int = 128
    max_position_embeddings: int = 128
    rope_theta: float = 10000.0
    initializer_range: float = 0.1       # as ModelConfig's: the quick SFT learns the task

    def __post_init__(self):
        if self.family not in ("qwen2", "qwen3"):
            raise ValueError(f"ArchConfig.family: {self.family!r} is not 'qwen2' or 'qwen3'")
        if (self.head_dim is None) != (self.family == "qwen2"):
            raise ValueError(f"ArchConfig.head_dim: {self.head_dim!r}: qwen2's is hidden_size / "
                             "num_attention_heads (None: vLLM's Qwen2 ignores a config head_dim, "
                             "transformers' reads it), qwen3 needs an explicit one")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"ArchConfig.num_key_value_heads: {self.num_key_value_heads} does not divide "
                             f"num_attention_heads {self.num_attention_heads}")

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict:
        return asdict(self)


# the paper models' layouts at toy width: Qwen2.5-Math-7B (28 query heads, 4 kv heads of 128 = 3584 / 28) and
# Qwen3-8B-Base (32 query heads, 8 kv heads of an explicit 128): here 4 query heads, 2 kv heads of 32 each;
# Qwen3's head_dim 32 is twice hidden_size / num_attention_heads = 16
QWEN2_ARCH = ArchConfig(family="qwen2", hidden_size=128)
QWEN3_ARCH = ArchConfig(family="qwen3", hidden_size=64, head_dim=32, intermediate_size=192)
ARCHS = {"qwen2": QWEN2_ARCH, "qwen3": QWEN3_ARCH}    # by family: `reproduce.toy.build --arch`


def padded_vocab(n_tokens: int, multiple: int) -> int:
    """The embedding rows for a tokenizer of n_tokens: n_tokens rounded up to a multiple of `multiple`.
    padded_vocab(103, 128) = 128; padded_vocab(151665, 128) = 151680 (Qwen pads further, to 151,936)."""
    if n_tokens < 1 or multiple < 1:
        raise ValueError(f"padded_vocab: n_tokens {n_tokens} and multiple {multiple} must be >= 1")
    return -(-n_tokens // multiple) * multiple


def build_arch_model(tok, cfg: ArchConfig, seed: int = 0):
    """A randomly initialised Qwen2ForCausalLM or Qwen3ForCausalLM of layout `cfg` for the tokenizer `tok`
    (its vocabulary padded: the rows above len(tok) are never a token, as in Qwen's checkpoints)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    kw = _layout_kwargs(tok, cfg, vocab_size=padded_vocab(len(tok), cfg.vocab_multiple), tied=False)
    torch.manual_seed(seed)
    if cfg.family == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=cfg.head_dim, **kw))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**kw))
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

    from common.rollout.hf import cache_arg, check_cache_filled

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
