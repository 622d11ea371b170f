"""The pre-flight's checks (reproduce/preflight.py) on injected facts: the driver against the wheels' CUDA,
the allocator setting and compile caches on a shared home, the disk and vLLM's share of a GPU (its margin),
Python for vLLM, the hub token and access."""
from armor import memory
from armor.config import load_config
from reproduce import preflight
from reproduce.matrix.presets import load_preset

P7 = load_preset("qwen25-math-7b")


def _facts(**kw):
    return preflight.Facts(**{"env": {}, "home": "/home/u", "mounts": [["/", "ext4"]], "free_bytes": 10 ** 13,
                              "driver": "580.65.06", "gpu_memory_gib": 80.0, "cuda": "13.0", **kw})


def test_driver_check_against_the_cuda_of_the_wheels():
    assert preflight.check_driver(_facts()).status == preflight.OK
    bad = preflight.check_driver(_facts(driver="575.57.08"))
    assert bad.status == preflight.FAIL and "older than the 580.65.06" in bad.detail
    assert "update the driver" in bad.detail
    assert preflight.check_driver(_facts(driver="535.1", cuda="12.4")).status == preflight.OK
    assert preflight.check_driver(_facts(driver=None)).status == preflight.NOT_CHECKED


def test_expandable_segments_and_compile_caches_on_a_shared_home_fail_with_their_fix():
    expandable = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    bad = preflight.check_alloc_conf(_facts(env=expandable), "vllm")
    assert bad.status == preflight.FAIL and "unset it" in bad.detail
    assert preflight.check_alloc_conf(_facts(env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}),
                                      "vllm").status == preflight.OK
    assert preflight.check_alloc_conf(_facts(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
                                      "hf").status == preflight.OK          # no vLLM: no sleep mode
    nfs = [["/", "ext4"], ["/home", "nfs4"], ["/tmp", "tmpfs"]]
    bad = preflight.check_compile_cache(_facts(mounts=nfs), "vllm")
    assert bad.status == preflight.FAIL and "VLLM_CACHE_ROOT=/home/u/.cache/vllm (nfs4)" in bad.detail
    assert "TORCHINDUCTOR_CACHE_DIR" not in bad.detail                      # /tmp: node-local already
    local = {"VLLM_CACHE_ROOT": "/tmp/v", "TRITON_CACHE_DIR": "/tmp/t", "FLASHINFER_WORKSPACE_BASE": "/tmp/f",
             "TORCH_EXTENSIONS_DIR": "/tmp/e"}
    assert preflight.check_compile_cache(_facts(mounts=nfs, env=local), "vllm").status == preflight.OK


def test_disk_and_the_vllm_share_of_a_run_shrunk_to_one_node():
    assert preflight.check_disk(_facts(free_bytes=10 ** 12), 2 * 10 ** 12, "runs").status == preflight.FAIL
    assert preflight.check_disk(_facts(), 2 * 10 ** 12, "runs").status == preflight.OK
    cfg = load_config(P7.path, ["rollout.gpu_memory_utilization=0.9"])
    shape = memory.KNOWN[cfg.model.path]
    per_rank = lambda w: shape.params / w * (4 + 8 + 2) / 2 ** 30     # fp32 masters, AdamW, a bf16 πref
    one = preflight.check_vllm_share(_facts(), cfg, 8, shape)
    assert one.status == preflight.FAIL and f"{per_rank(8):.1f} GiB of training state" in one.detail
    assert per_rank(8) + 0.9 * 80 + 2 > 80 > per_rank(128) + 0.9 * 80 + 2
    assert preflight.check_vllm_share(_facts(), cfg, 128, shape).status == preflight.OK
    assert preflight.check_vllm_share(_facts(gpu_memory_gib=None), cfg, 8, shape).status == \
        preflight.NOT_CHECKED


def test_the_vllm_share_prints_its_margin_and_warns_with_a_setting_when_thin():
    cfg = load_config(P7.path, ["rollout.gpu_memory_utilization=0.8"])
    shape = memory.KNOWN[cfg.model.path]
    held = preflight.resident_gib(cfg, 8, shape)
    # a GPU whose margin beside 0.8 of it is 1 GiB: warned, with the largest share leaving SHARE_SLACK_GIB
    gib = (held + preflight.GPU_MARGIN_GIB + 1.0) / 0.2
    thin = preflight.check_vllm_share(_facts(gpu_memory_gib=gib), cfg, 8, shape)
    u = preflight.suggested_utilization(held, gib)
    assert thin.status == preflight.WARN and "margin 1.0 GiB" in thin.detail
    assert f"rollout.gpu_memory_utilization={u:.2f} leaves" in thin.detail
    assert held + u * gib + preflight.GPU_MARGIN_GIB + preflight.SHARE_SLACK_GIB <= gib
    assert held + (u + 0.01) * gib + preflight.GPU_MARGIN_GIB + preflight.SHARE_SLACK_GIB > gib
    roomy = preflight.check_vllm_share(_facts(gpu_memory_gib=gib * 2), cfg, 8, shape)
    assert roomy.status == preflight.OK and "margin" in roomy.detail
    assert preflight.failures([thin, roomy]) == []                  # a warning does not stop a submission


def test_python_for_vllm_and_the_hub_token_and_access(monkeypatch, tmp_path):
    assert preflight.check_python(_facts(python="3.10.14"), "vllm").status == preflight.FAIL
    assert ">= 3.11" in preflight.check_python(_facts(python="3.10.14"), "vllm").detail
    assert preflight.check_python(_facts(python="3.11.7"), "vllm").status == preflight.OK
    assert preflight.check_python(_facts(python="3.10.14"), "hf").status == preflight.OK

    class Item:                                   # reproduce.hub.Item's surface the checks read
        def __init__(self, name, gated, kind="dataset"):
            self.repo_id, self.gated, self.kind, self.benchmark = name, gated, kind, name.split("/")[-1]

        def done(self):
            return False

        def label(self):
            return self.repo_id
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("ARMOR_HUB_MIRROR", raising=False)
    monkeypatch.setattr("reproduce.hub.token", lambda: None)
    token, access = preflight.check_hub([Item("a/gated", True), Item("b/open", False)], "here")
    assert token.status == preflight.FAIL and "a/gated" in token.detail and "HF_TOKEN" in token.detail
    assert access.status == preflight.NOT_CHECKED and "ARMOR_HUB_MIRROR" in access.detail
    token, _ = preflight.check_hub([Item("b/open", False)], "here")
    assert token.status == preflight.OK and "not set" in token.detail
    monkeypatch.setenv("ARMOR_HUB_MIRROR", str(tmp_path))            # a mirror without the items
    token, access = preflight.check_hub([Item("a/gated", True)], "here")
    assert token.status == preflight.OK and access.status == preflight.FAIL and "not in the mirror" in \
        access.detail
    (tmp_path / "datasets" / "a" / "gated").mkdir(parents=True)
    assert preflight.check_hub([Item("a/gated", True)], "here")[1].status == preflight.OK
    assert [c.status for c in preflight.check_hub([], "here")] == [preflight.OK, preflight.OK]
