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


def forward_logprobs(model, batch: TokenBatch, temperature: float = 1.0, with_entropy: bool = False):
    """Per-token log πθ(y_t | x, y_<t) of the response tokens: [N, R] (and the entropy [N, R], without grad)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                   position_ids=batch.position_ids, use_cache=False).logits
    logits = logits[:, batch.prompt_len - 1:-1, :].float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1) * batch.response_mask
    if not with_entropy:
        return logp, None
    with torch.no_grad():   # a metric only: no objective here has an entropy term
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@torch.no_grad()
def batched_logprobs(model, batch: TokenBatch, micro_batch: int, temperature: float = 1.0,
                     with_entropy: bool = False):
    """forward_logprobs over micro-batches, without gradients (old / reference / teacher log-probs)."""
    was_training = model.training
    model.eval()
    outs, ents = [], []
    for s in range(0, batch.input_ids.shape[0], micro_batch):
        lp, ent = forward_logprobs(model, batch.rows(slice(s, s + micro_batch)), temperature, with_entropy)
        outs.append(lp)
        if ent is not None:
            ents.append(ent)
    if was_training:
        model.train()
    return torch.cat(outs), (torch.cat(ents) if ents else None)
