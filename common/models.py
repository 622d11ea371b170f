"""Hugging Face model folders: checking a path, loading a model or tokenizer, a weightless (meta) build.

Shared by the trainer (armor), the harness (eval), the rollout engines and the benchmarks."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from common.weight_files import check_weights

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MODEL_FILES = ("config.json",)


def check_model_path(path: str, key: str) -> None:
    """Fail early, naming the config key, when a local model folder lacks HF files or has a damaged weight
    file (`check_weights`).

    A string that is not an existing path and looks like `org/name` is taken as a hub id."""
    p = Path(path)
    if p.exists():
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"{key}: {path!r} has no config.json (not a Hugging Face model folder)")
        check_weights(p, key)
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
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype],
                                                 trust_remote_code=trust_remote_code)
    model.to(device)
    if gradient_checkpointing:
        enable_activation_checkpointing(model)
    return model


def build_on_meta(path: str, dtype: str | None = None, gradient_checkpointing: bool = False,
                  trust_remote_code: bool = False):
    """The model's architecture on the meta device: no memory, no weights (dtype None: the config's default).
    What every rank shards before rank 0's weights are broadcast into it (armor.parallel.load_from_rank0)."""
    from transformers import AutoConfig
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    kw = {"dtype": DTYPES[dtype]} if dtype else {}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code, **kw)
    if gradient_checkpointing:
        enable_activation_checkpointing(model)
    return model


def load_skeleton(path: str, trust_remote_code: bool = False):
    """The model's architecture without weights (meta device) and its generation config: what save_pretrained
    needs to write full tensors gathered elsewhere as an HF folder (`save_pretrained(dir,
    state_dict=...)`)."""
    from transformers import GenerationConfig
    model = build_on_meta(path, trust_remote_code=trust_remote_code)
    try:
        model.generation_config = GenerationConfig.from_pretrained(path)
    except OSError:                    # a folder without generation_config.json: the config's defaults
        pass
    return model


def enable_activation_checkpointing(model) -> None:
    """Recompute each decoder layer's activations in backward (transformers >= 5.2x names it
    activation_checkpointing_enable; older ones, gradient_checkpointing_enable)."""
    fn = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    fn()
