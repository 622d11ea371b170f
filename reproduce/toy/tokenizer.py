"""A character-level tokenizer for the toy world, built locally with the ``tokenizers`` library and wrapped as
a ``transformers.PreTrainedTokenizerFast`` (``AutoTokenizer.from_pretrained(dir)`` loads it offline).

Vocabulary: 7 special tokens, then every printable ASCII character and newline (one token per character;
anything else maps to ``<|unk|>``).

Chat template (Jinja, stored in the tokenizer config)::

    <|user|>6+3-8+1+2=?<|assistant|>6+3=9,...\\boxed{4}<|eos|>

* ``<|eos|>`` (the eos token) ends every assistant turn; generation stops on it.
* ``add_generation_prompt=True`` appends ``<|assistant|>``.
* **System messages are ignored** (not rendered): the tiny base model was never trained with one, so a system
  prompt (e.g. a generic "reason step by step" instruction from a preset) would only shift it
  off-distribution.
"""
from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK, BOS = "<|pad|>", "<|eos|>", "<|unk|>", "<|bos|>"
SYSTEM, USER, ASSISTANT = "<|system|>", "<|user|>", "<|assistant|>"
SPECIALS = [PAD, EOS, UNK, BOS, SYSTEM, USER, ASSISTANT]
CHARS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]  # 95 printable + '\n'

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{ '<|user|>' + message['content'] }}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{ '<|assistant|>' + message['content'] + '<|eos|>' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>' }}{%- endif -%}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for c in CHARS:
        vocab.setdefault(c, len(vocab))
    # WordLevel over single characters: split every character into its own "word".
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")  # type: ignore[arg-type]
    tk.decoder = decoders.Fuse()
    tk.add_special_tokens(SPECIALS)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        bos_token=BOS,
        additional_special_tokens=[SYSTEM, USER, ASSISTANT],
        padding_side="left",
        model_max_length=256,
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok
