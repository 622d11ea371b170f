"""Model loading (Hugging Face format) and batched per-token log-probs of responses."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MODEL_FILES = ("config.json",)


def check_model_path(path: str, key: str) -> None:
    """Fail early, naming the config key, when a local model folder lacks HF files.

    A string that is not an existing path and looks like `org/name` is taken as a hub id."""
    p = Path(path)
    if p.exists():
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"{key}: {path!r} has no config.json (not a Hugging Face model folder)")
        return
    if path.count("/") == 1 and not path.startswith((".", "/")) and not path.endswith("/"):
        return  # a hub id; resolved by transformers (needs network or the HF cache)
    raise FileNotFoundError(f"{key}: {path!r} does not exist")


def load_tokenizer(path: str):
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str, dtype: str = "float32", device: str | torch.device = "cpu",
               gradient_checkpointing: bool = False, trust_remote_code: bool = False):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code)
    model.to(device)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model


@dataclass
class TokenBatch:
    """Prompt+response sequences laid out for one forward pass.

    input_ids / attention_mask / position_ids: [N, P+R]; prompts left-padded to P, responses
    right-padded to R. response_mask: [N, R] (1 on real response tokens)."""
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    response_mask: torch.Tensor
    prompt_len: int

    def to(self, device):
        return TokenBatch(self.input_ids.to(device), self.attention_mask.to(device), self.position_ids.to(device),
                          self.response_mask.to(device), self.prompt_len)

    def rows(self, idx) -> "TokenBatch":
        return TokenBatch(self.input_ids[idx], self.attention_mask[idx], self.position_ids[idx],
                          self.response_mask[idx], self.prompt_len)

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len:]


def make_token_batch(prompt_ids: list[list[int]], response_ids: list[list[int]], pad_id: int) -> TokenBatch:
    n = len(prompt_ids)
    P = max(len(p) for p in prompt_ids)
    R = max(1, max(len(r) for r in response_ids))
    ids = torch.full((n, P + R), pad_id, dtype=torch.long)
    att = torch.zeros((n, P + R), dtype=torch.long)
    for j, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        ids[j, P - len(p):P] = torch.tensor(p, dtype=torch.long)
        att[j, P - len(p):P] = 1
        if r:
            ids[j, P:P + len(r)] = torch.tensor(r, dtype=torch.long)
            att[j, P:P + len(r)] = 1
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    return TokenBatch(ids, att, pos, att[:, P:].clone(), P)


def _token_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float, with_entropy: bool):
    """log softmax(logits / T) at `ids`, and the entropy H = -Σ_v p_v log p_v (no grad).

    logits: [N, T, V] (any float dtype; computed in fp32), ids: [N, T] -> logp [N, T], entropy [N, T] | None."""
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return logp, None
    with torch.no_grad():   # a metric only: no objective here has an entropy term
        return logp, -(logp_all.exp() * logp_all).sum(-1)


def chunked_logprobs(hidden: torch.Tensor, lm_head: torch.nn.Module, ids: torch.Tensor, temperature: float = 1.0,
                     with_entropy: bool = False, chunk_tokens: int = 256):
    """Per-token log-probs from the last hidden states, `chunk_tokens` positions at a time.

    hidden: [N, R, H] (the states that predict each response token), ids: [N, R] -> logp [N, R], entropy
    [N, R] | None. Equal to log_softmax(lm_head(hidden) / T) gathered at ids, but only one [N, chunk, V] block of
    logits exists at a time: with gradients each chunk is recomputed in backward (torch.utils.checkpoint), so
    the extra memory is bounded by the chunk, not by R × V (at V = 152,064 one fp32 [8192, V] block is 4.6 GiB)."""
    from torch.utils.checkpoint import checkpoint
    logps, ents = [], []
    for t0 in range(0, hidden.shape[1], chunk_tokens):
        h, i = hidden[:, t0:t0 + chunk_tokens], ids[:, t0:t0 + chunk_tokens]
        fn = lambda h, i: _token_logprobs(lm_head(h), i, temperature, with_entropy)   # noqa: E731
        lp, ent = checkpoint(fn, h, i, use_reentrant=False) if torch.is_grad_enabled() else fn(h, i)
        logps.append(lp)
        ents.append(ent)
    return torch.cat(logps, 1), (torch.cat(ents, 1) if with_entropy else None)


def forward_logprobs(model, batch: TokenBatch, temperature: float = 1.0, with_entropy: bool = False,
                     chunk_tokens: int | None = None):
    """Per-token log πθ(y_t | x, y_<t) of the response tokens: [N, R] (and the entropy [N, R], without grad).

    chunk_tokens: None computes the logits of every position at once; an int runs the backbone, then the
    lm_head and log-softmax over the response positions `chunk_tokens` at a time (`chunked_logprobs`)."""
    if chunk_tokens is not None:
        hidden = model.base_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                  position_ids=batch.position_ids, use_cache=False).last_hidden_state
        logp, entropy = chunked_logprobs(hidden[:, batch.prompt_len - 1:-1], model.get_output_embeddings(),
                                         batch.response_ids, temperature, with_entropy, chunk_tokens)
        return logp * batch.response_mask, entropy
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                   position_ids=batch.position_ids, use_cache=False).logits
    logp, entropy = _token_logprobs(logits[:, batch.prompt_len - 1:-1, :], batch.response_ids, temperature,
                                    with_entropy)
    return logp * batch.response_mask, entropy


@torch.no_grad()
def batched_logprobs(model, batch: TokenBatch, micro_batch: int, temperature: float = 1.0,
                     with_entropy: bool = False, chunk_tokens: int | None = None):
    """forward_logprobs over micro-batches, without gradients (old / reference / teacher log-probs)."""
    was_training = model.training
    model.eval()
    outs, ents = [], []
    for s in range(0, batch.input_ids.shape[0], micro_batch):
        lp, ent = forward_logprobs(model, batch.rows(slice(s, s + micro_batch)), temperature, with_entropy,
                                   chunk_tokens)
        outs.append(lp)
        if ent is not None:
            ents.append(ent)
    if was_training:
        model.train()
    return torch.cat(outs), (torch.cat(ents) if ents else None)
