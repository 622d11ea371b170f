"""vllm.inputs.TokensPrompt (vllm-0.33.0: inputs/llm.py:111, exported by inputs/__init__.py:33): a
TypedDict."""
from typing import TypedDict


class TokensPrompt(TypedDict, total=False):
    prompt_token_ids: list[int]
    prompt: str
