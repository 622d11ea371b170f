"""The compiled decode kernel (common/fast/decode_kernel.c via decode_kernel.py): each function against torch
on hand-built inputs, the stepper on long contexts against the model's forward, and `compute.fast: native`
failing, named, where the kernel cannot be had."""
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, Qwen3Config

from common import fast
from common.fast import decode_kernel
from common.fast.static_kv_decode import StaticStepper
from common.yaml_config import ConfigError


@pytest.fixture(scope="module")
def k():
    lib = decode_kernel.kernel()
    assert lib is not None, "the decode kernel did not build (a C compiler is needed)"
    return lib


def test_rms_rows_is_the_weightless_rms_norm(k):
    torch.manual_seed(0)
    x = torch.randn(5, 37) * torch.tensor([1e-3, 1.0, 10.0, 1e3, 0.5])[:, None]
    out = torch.empty_like(x)
    k.rms_rows(5, 37, x.data_ptr(), out.data_ptr(), 1e-6)
    torch.testing.assert_close(out, F.rms_norm(x, (37,), None, 1e-6), rtol=1e-6, atol=1e-7)


def test_silu_mul_over_the_whole_float_range(k):
    """silu(gate) * up, its exp a polynomial: within 2 float roundings of torch, 0 (not NaN) far below."""
    gate = torch.cat([torch.linspace(-120, 120, 2001), torch.tensor([-1e30, -88.5, 88.5, 0.0])])
    up = torch.linspace(-2, 3, len(gate))
    gu = torch.cat([gate, up])[None]
    out = torch.empty(1, len(gate))
    k.silu_mul(1, len(gate), gu.data_ptr(), out.data_ptr())
    torch.testing.assert_close(out[0], F.silu(gate) * up, rtol=3e-7, atol=1e-30)
    assert torch.isfinite(out).all()


def _attend_reference(y, cs, pos, keys_t, values, bias, end, scale, hq, hkv, d, qn, kn, eps):
    """The same step with torch: per-head norm, RoPE, cache write at slot end - 1, softmax attention."""
    n, heads = y.shape[0], hq + 2 * hkv
    h = y.view(n, heads, d).clone()
    if qn is not None:
        h[:, :hq] = F.rms_norm(h[:, :hq], (d,), qn, eps)
        h[:, hq:hq + hkv] = F.rms_norm(h[:, hq:hq + hkv], (d,), kn, eps)
    cos, sin = cs[pos, 0, 0], cs[pos, 1, 0]                       # [n, d]
    rot = h * cos[:, None] + torch.roll(h, d // 2, -1) * sin[:, None]
    keys_t[:, :, :, end - 1] = rot[:, hq:hq + hkv]
    values[:, :, end - 1] = h[:, hq + hkv:]
    kk = keys_t[..., :end].transpose(-1, -2).repeat_interleave(hq // hkv, 1)     # [n, hq, end, d]
    vv = values[:, :, :end].repeat_interleave(hq // hkv, 1)
    scores = bias[..., :end] + scale * torch.einsum("nhd,nhsd->nhs", rot[:, :hq], kk)
    return torch.einsum("nhs,nhsd->nhd", scores.softmax(-1), vv).reshape(n, hq * d)


@pytest.mark.parametrize("end", [1, 7, 45])
@pytest.mark.parametrize("qk_norm", [False, True])
def test_attend_matches_torch(k, end, qk_norm):
    """6 query heads on 2 kv heads, head width 12 (an 8-wide block and 4 left over), up to 45 filled slots
    (32- and 8-slot blocks and a tail), padding keys masked; the new k and v land in slot end - 1."""
    torch.manual_seed(end)
    n, hq, hkv, d, slots, scale, eps = 3, 6, 2, 12, 50, 0.3, 1e-6
    heads = hq + 2 * hkv
    y = torch.randn(n, heads * d)
    cs = torch.randn(slots, 2, heads, d)
    pos = torch.tensor([end - 1, end + 1, 2], dtype=torch.int64)
    keys_t, values = torch.randn(n, hkv, d, slots), torch.randn(n, hkv, slots, d)
    bias = torch.zeros(n, hq, slots)
    bias[1, :, : end // 2] = float("-inf")                        # row 1's prompt padding
    qn, kn = (torch.rand(d) + 0.5, torch.rand(d) + 0.5) if qk_norm else (None, None)
    want_k, want_v = keys_t.clone(), values.clone()
    want = _attend_reference(y, cs, pos, want_k, want_v, bias, end, scale, hq, hkv, d, qn, kn, eps)
    out, work = torch.empty(n, hq * d), torch.empty(hq * d + 2 * d + slots)
    ptr = (lambda t: None if t is None else t.data_ptr())
    k.attend(n, hq, hkv, d, slots, end, scale, y.data_ptr(), cs.data_ptr(), pos.data_ptr(), ptr(qn), ptr(kn),
             eps, keys_t.data_ptr(), values.data_ptr(), bias.data_ptr(), out.data_ptr(), work.data_ptr())
    torch.testing.assert_close(keys_t, want_k, rtol=1e-6, atol=1e-6)
    assert torch.equal(values, want_v)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)


def test_long_contexts_give_the_models_logits(k):
    """The stepper on prompts of 40-47 tokens (every block size of the kernel's loops) decoding 6 tokens, with
    head width 12, against the model's own forward."""
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=60, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=128)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    prompts = [[(5 * i + j) % 57 + 3 for j in range(40 + 7 * i)] for i in range(2)]
    plen = max(map(len, prompts))
    ids = torch.tensor([[0] * (plen - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (plen - len(p)) + [1] * len(p) for p in prompts])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        st = StaticStepper(model, kernel=True)
        assert st.kernel is not None
        logits, nxt, seqs = st.prefill(ids, mask, pos, 6), pos[:, -1] + 1, [list(p) for p in prompts]
        for t in range(6):
            tok = logits.argmax(-1)
            for j in range(2):
                seqs[j].append(int(tok[j]))
            logits = st.decode(tok, nxt, t)
            nxt = nxt + 1
            for j in range(2):
                full = model(input_ids=torch.tensor([seqs[j]])).logits[0, -1]
                torch.testing.assert_close(logits[j], full, atol=2e-5, rtol=1e-4)


def test_native_without_a_compiler_fails_naming_the_key(monkeypatch, tmp_path):
    """compute.fast=native where no compiler is: a one-line ConfigError naming the key and value, no
    fallback; auto and off need no compiler, and auto's stepper decodes with torch operations."""
    monkeypatch.setattr(decode_kernel, "_loaded", {})
    monkeypatch.setenv("ARMOR_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(ConfigError) as e:
        fast.choose("native", "cpu", "float32")
    msg = str(e.value)
    assert msg.startswith("compute.fast: 'native' cannot run") and "no C compiler" in msg and "\n" not in msg
    auto = fast.choose("auto", "cpu", "float32")
    assert auto == fast.FastPaths(True, True, False) and fast.choose("off", "cpu", "float32") == fast.OFF
    model = AutoModelForCausalLM.from_config(Qwen3Config(
        vocab_size=30, hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8)).eval()
    with torch.inference_mode():
        st = StaticStepper(model, kernel=auto.decode_kernel)
        assert st.kernel is None
        ids = torch.tensor([[3, 4, 5]])
        mask = torch.ones_like(ids)
        st.prefill(ids, mask, mask.cumsum(-1) - 1, 2)
        assert torch.isfinite(st.decode(torch.tensor([6]), torch.tensor([3]), 0)).all()


def test_the_trainer_asked_for_native_without_a_compiler_fails_before_work(world, tmp_path):
    """`python -m armor.train ... compute.fast=native` where no compiler is: exit 2 with one line naming the
    key and its value, no run folder."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "never"
    args = [f"model.path={world / 'base_model'}", f"data.train={world / 'data' / 'train.jsonl'}",
            f"validation.benchmarks=[toy_val={world / 'data' / 'validation.jsonl'}]", f"output_dir={out}",
            "compute.fast=native"]
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc"), "ARMOR_NATIVE_CACHE": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "armor.train", "--config",
                        str(root / "reproduce" / "presets" / "smoke.yaml"), *args],
                       capture_output=True, text=True, cwd=root, env=env)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1, r.stderr[-2000:]
    assert err[0].startswith("error: compute.fast: 'native' cannot run") and "no C compiler" in err[0]
    assert not out.exists()


def test_native_where_the_kernel_cannot_decode_fails_naming_the_key():
    """The kernel decodes CPU float32 SiLU models: an HF engine asked for it on another model fails at its
    start, naming compute.fast."""
    from common.rollout.hf import HFEngine
    model = AutoModelForCausalLM.from_config(Qwen3Config(
        vocab_size=30, hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, hidden_act="gelu")).eval()

    class _Tok:
        eos_token_id, pad_token_id = 2, 0
    with pytest.raises(ConfigError, match="compute.fast: 'native' cannot run: .*hidden_act 'gelu'"):
        HFEngine(model, _Tok(), fast=fast.FastPaths(True, True, True))
    HFEngine(model, _Tok(), fast=fast.choose("auto", "cpu", "float32"))     # torch operations decode it


def test_the_build_is_cached_by_source_and_flags(monkeypatch, tmp_path):
    """A second build finds the first's file; the file is a loadable library named by a hash."""
    monkeypatch.setenv("ARMOR_NATIVE_CACHE", str(tmp_path))
    first = decode_kernel.build()
    stamp = first.stat().st_mtime_ns
    assert decode_kernel.build() == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]          # no temporary file left behind
    decode_kernel.load(first).attend


@pytest.mark.skipif(not decode_kernel._cpu_has("avx2") or not decode_kernel._cpu_has("fma"),
                    reason="needs AVX2 and FMA")
def test_the_same_bits_with_any_vector_unit(tmp_path, monkeypatch):
    """The kernel's promise (no sum reordered, no fused multiply-add): built for SSE2 only, for AVX2, and for
    AVX2 with FMA allowed, its outputs are equal bit for bit."""
    monkeypatch.setenv("ARMOR_NATIVE_CACHE", str(tmp_path))
    units = ([], ["-mavx2"], ["-mavx2", "-mfma"])
    libs = [decode_kernel.load(decode_kernel.build(flags=decode_kernel.FLAGS + extra)) for extra in units]
    torch.manual_seed(1)
    n, hq, hkv, d, slots, end = 5, 4, 2, 16, 48, 45
    heads = hq + 2 * hkv
    y, cs = torch.randn(n, heads * d), torch.randn(slots, 2, heads, d)
    pos = torch.randint(0, slots, (n,))
    x, gu = torch.randn(n, 40) * 3, torch.randn(n, 2 * 40) * 4
    qn, kn = torch.rand(d) + 0.5, torch.rand(d) + 0.5
    outs = []
    for lib in libs:
        keys_t = torch.randn(n, hkv, d, slots, generator=torch.Generator().manual_seed(2))
        values = torch.randn(n, hkv, slots, d, generator=torch.Generator().manual_seed(3))
        bias = torch.zeros(n, hq, slots)
        o, work = torch.empty(n, hq * d), torch.empty(hq * d + 2 * d + slots)
        xn, h = torch.empty_like(x), torch.empty(n, 40)
        lib.attend(n, hq, hkv, d, slots, end, 0.25, y.data_ptr(), cs.data_ptr(), pos.data_ptr(),
                   qn.data_ptr(), kn.data_ptr(), 1e-6, keys_t.data_ptr(), values.data_ptr(), bias.data_ptr(),
                   o.data_ptr(), work.data_ptr())
        lib.rms_rows(n, 40, x.data_ptr(), xn.data_ptr(), 1e-6)
        lib.silu_mul(n, 40, gu.data_ptr(), h.data_ptr())
        outs.append((o, keys_t, xn, h))
    for other in outs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(outs[0], other))


def test_an_unwritable_cache_folder_falls_back_to_a_temporary_one(monkeypatch, tmp_path):
    """A read-only home (some clusters' compute nodes): the kernel is built in a temporary folder instead."""
    monkeypatch.delenv("ARMOR_NATIVE_CACHE", raising=False)
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    out = decode_kernel.cache_dir()
    assert not str(out).startswith(str(blocked)) and out.name.startswith("armor-repro-native-")
    # no login name and no os.getuid (Windows): still a folder of its own name
    import getpass
    import os

    def no_user():
        raise OSError("no login name")
    monkeypatch.setattr(getpass, "getuser", no_user)
    monkeypatch.delattr(os, "getuid", raising=False)
    assert decode_kernel.cache_dir().name == "armor-repro-native-user"
