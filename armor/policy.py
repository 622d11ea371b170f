"""Prompt+response token batches and per-token log-probs of responses (model loading: common.models)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from common.fast import lean_forward

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
        return TokenBatch(self.input_ids.to(device), self.attention_mask.to(device),
                          self.position_ids.to(device), self.response_mask.to(device), self.prompt_len)

    def rows(self, idx) -> "TokenBatch":
        return TokenBatch(self.input_ids[idx], self.attention_mask[idx], self.position_ids[idx],
                          self.response_mask[idx], self.prompt_len)

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len:]

    @property
    def seq_lens(self) -> torch.Tensor:
        """Real tokens (prompt + response) of each row: [N]."""
        return self.attention_mask.sum(-1)

    def trim(self) -> "TokenBatch":
        """The same rows padded only to their own longest prompt and response: the left-padding columns no row
        uses and the right-padding columns after the longest response dropped (positions are unchanged)."""
        P = self.prompt_len
        prompt = int(self.attention_mask[:, :P].sum(-1).max())
        resp = max(1, int(self.response_mask.sum(-1).max()))
        cols = slice(P - prompt, P + resp)
        return TokenBatch(self.input_ids[:, cols], self.attention_mask[:, cols], self.position_ids[:, cols],
                          self.response_mask[:, :resp], prompt)


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

    logits: [N, T, V] (any float dtype; computed in fp32), ids: [N, T] -> logp [N, T], entropy [N, T] |
    None."""
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return logp, None
    with torch.no_grad():   # a metric only: no objective here has an entropy term
        return logp, -(logp_all.exp() * logp_all).sum(-1)


def chunked_logprobs(hidden: torch.Tensor, lm_head: torch.nn.Module, ids: torch.Tensor,
                     temperature: float = 1.0, with_entropy: bool = False, chunk_tokens: int = 1024):
    """Per-token log-probs from the last hidden states, `chunk_tokens` token positions at a time.

    hidden: [N, R, H] (the states that predict each response token), ids: [N, R] -> logp [N, R], entropy
    [N, R] | None. Equal to log_softmax(lm_head(hidden) / T) gathered at ids, but the N x R positions are
    taken as one flat sequence and only one [chunk_tokens, V] block of logits exists at a time, however many
    rows the micro-batch has; with gradients each chunk is recomputed in backward (torch.utils.checkpoint), so
    the extra memory is bounded by the chunk, not by N x R x V (at V = 152,064 one fp32 [8192, V] block is 4.6
    GiB)."""
    from torch.utils.checkpoint import checkpoint
    N, R = ids.shape
    flat_h, flat_ids = hidden.reshape(N * R, hidden.shape[-1]), ids.reshape(N * R)
    fn = lambda h, i: _token_logprobs(lm_head(h)[None], i[None], temperature, with_entropy)   # noqa: E731
    logps, ents = [], []
    for t0 in range(0, N * R, chunk_tokens):
        h, i = flat_h[t0:t0 + chunk_tokens], flat_ids[t0:t0 + chunk_tokens]
        lp, ent = checkpoint(fn, h, i, use_reentrant=False) if torch.is_grad_enabled() else fn(h, i)
        logps.append(lp[0])
        ents.append(ent[0] if with_entropy else None)
    # new tensors, not views of the concatenation: FSDP2 hooks backward on a forward method's outputs
    logp = torch.cat(logps).view(N, R).clone()
    return logp, (torch.cat(ents).view(N, R).clone() if with_entropy else None)


# the name parallel.shard_model registers as an FSDP2 forward method
CHUNKED_METHOD = "armor_chunked_logprobs"


def _chunked_response_logprobs(model, input_ids, attention_mask, position_ids, prompt_len: int,
                               temperature: float, with_entropy: bool, chunk_tokens: int):
    """The backbone once, then the lm_head and log-softmax over the response positions `chunk_tokens` at a
    time. A method of the model when sharded (FSDP2 then gathers the root's own weights, the embeddings, the
    final norm and the lm_head, around it, as it does around `forward`)."""
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              use_cache=False).last_hidden_state
    return chunked_logprobs(hidden[:, prompt_len - 1:-1], model.get_output_embeddings(),
                            input_ids[:, prompt_len:], temperature, with_entropy, chunk_tokens)


def attach_chunked_logprobs(model) -> str:
    """Bind the chunked log-prob computation to `model` as the method CHUNKED_METHOD; returns its name."""
    import types
    setattr(model, CHUNKED_METHOD, types.MethodType(_chunked_response_logprobs, model))
    return CHUNKED_METHOD


def _lean_logprobs(model, batch: TokenBatch, temperature: float, with_entropy: bool,
                   chunk_tokens: int | None):
    """forward_logprobs through common.fast.lean_forward: the backbone on the real tokens only, then the
    lm_head and log-softmax on the Tr response tokens alone (`chunk_tokens` at a time when given) -> [N, R]
    (0 off the response mask; entropy likewise)."""
    N, R = batch.response_mask.shape
    L = batch.input_ids.shape[1]
    rows, cols = batch.response_mask.nonzero(as_tuple=True)             # [Tr] each response token
    target = rows * L + batch.prompt_len + cols                          # its flat position
    hidden = lean_forward.hidden_states(model, batch.input_ids, batch.attention_mask, batch.position_ids,
                                        target - 1, batch.prompt_len)    # the state that predicts it
    ids = batch.input_ids.reshape(-1).index_select(0, target)
    head = model.get_output_embeddings()
    if chunk_tokens is None:
        lp, ent = _token_logprobs(head(hidden)[None], ids[None], temperature, with_entropy)
    else:
        lp, ent = chunked_logprobs(hidden[None], head, ids[None], temperature, with_entropy, chunk_tokens)
    flat = rows * R + cols
    logp = lp.new_zeros(N * R).index_copy(0, flat, lp[0]).view(N, R)
    entropy = None if ent is None else ent.new_zeros(N * R).index_copy(0, flat, ent[0]).view(N, R)
    return logp, entropy


def forward_logprobs(model, batch: TokenBatch, temperature: float = 1.0, with_entropy: bool = False,
                     chunk_tokens: int | None = None, lean: bool = False):
    """Per-token log πθ(y_t | x, y_<t) of the response tokens: [N, R] (and the entropy [N, R], without grad).

    chunk_tokens: None computes the logits of every position at once; an int runs the backbone, then the
    lm_head and log-softmax over the response positions `chunk_tokens` at a time (`chunked_logprobs`), through
    the model's CHUNKED_METHOD when it has one (a sharded model must: parallel.shard_model attaches it).
    lean: through common.fast.lean_forward where it supports the model (the run's compute.fast chooses it)."""
    if lean and lean_forward.supports(model):
        return _lean_logprobs(model, batch, temperature, with_entropy, chunk_tokens)
    if chunk_tokens is not None:
        fn = getattr(model, CHUNKED_METHOD, None)
        args = (batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_len, temperature,
                with_entropy, chunk_tokens)
        logp, entropy = fn(*args) if fn is not None else _chunked_response_logprobs(model, *args)
        return logp * batch.response_mask, entropy
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                   position_ids=batch.position_ids, use_cache=False).logits
    logp, entropy = _token_logprobs(logits[:, batch.prompt_len - 1:-1, :], batch.response_ids, temperature,
                                    with_entropy)
    return logp * batch.response_mask, entropy
