"""bench.step_time's code path on the quick world with shrunken shapes (a smoke test, not a timing
assertion)."""
from pathlib import Path

import pytest

from bench import step_time as bench

SMALL = dict(steps=1, warmup=0, threads=1, prompts=2, group=4, max_new_tokens=6)


@pytest.fixture(scope="module")
def small_run(world):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench, "trl_version", lambda: None)   # the "TRL not installed" branch, with or without it
        return bench.run(world, **SMALL)


def test_bench_ours_and_report(small_run):
    res = small_run
    for arm in ("dapo", "armor"):
        s = res[arm]
        assert s["steps"] == 1 and set(bench.PHASES) <= set(s) and set(bench.PHASES) == set(s["tps"])
        assert s["total"] > 0 and s["tokens_generated"] > 0
        assert s["rows"][0]["threads_seen"] == 1
    d = res["dapo"]
    assert d["prompts_kept"] == 2 and d["tokens_trained"] == d["tokens_generated"]   # dynamic sampling off
    assert d["update"] > 0 and d["rows"][0]["updates"] == 1                          # one update per step
    assert res["trl"].startswith("TRL not installed")
    assert res["config"]["fast"] == bench.FAST == "native"          # the tiny presets' compute.fast
    text = bench.format_report(res)
    for needle in ("ARMOR / DAPO step time", "TRL: TRL not installed", "torch 2.", "compute.fast native",
                   "transformers", "load average", "generate", "update"):
        assert needle in text


def test_bench_report_with_trl_figures(small_run):
    res = dict(small_run)
    res["trl"] = {"total": 2 * res["dapo"]["total"], "generate": 0.5, "score": 0.01, "rest": 0.4,
                  "tokens_generated": 100, "tps": {"generate": 200.0, "total": 50.0}, "steps": 1,
                  "optimizer_steps": 1, "threads_seen": 1}
    text = bench.format_report(res)
    assert "DAPO / TRL step time:  0.50" in text and "TRL ms" in text


def test_bench_configs():
    w = Path("/nonexistent-world")
    d = bench.run_config(w, Path("/tmp/x"), "dapo", threads=2, total_steps=3)
    a = bench.run_config(w, Path("/tmp/x"), "armor", threads=2, total_steps=3)
    assert not d.algo.dynamic_sampling and not d.algo.anchor.enabled and d.algo.mix.variant == "plain"
    assert a.algo.anchor.enabled and a.algo.anchor.ref_n == 4 and a.algo.mix.variant == "mixed"
    assert a.algo.mix.alpha == 0.875
    for c in (d, a):
        assert c.batch.prompts_per_step == 8 and c.batch.group_size == 8 and c.batch.updates_per_step == 1
        assert c.lengths.max_response == 48 and c.rollout.temperature == 1.0 and c.threads == 2
        assert c.compute.fast == "native"
    off = bench.run_config(w, Path("/tmp/x"), "dapo", threads=2, total_steps=3, fast="off")
    assert off.compute.fast == "off"
    with pytest.raises(FileNotFoundError):
        bench.ensure_world(w)


def test_bench_interleaved_with_trl(world):
    pytest.importorskip("trl")
    res = bench.run(world, **dict(SMALL, max_new_tokens=4))
    t = res["trl"]
    assert isinstance(t, dict), t
    assert t["steps"] == 1 and t["optimizer_steps"] == 1 and t["total"] > 0 and t["tokens_generated"] > 0
    assert t["threads_seen"] == 1
    assert res["dapo"]["steps"] == res["armor"]["steps"] == 1   # our steps ran between TRL's
    assert "DAPO / TRL step time" in bench.format_report(res)


def test_bench_decode_prints_the_three_decoders(world, capsys):
    from bench import decode as bench_decode
    assert bench_decode.main(["--world", str(world), "--rows", "8,16", "--reps", "1", "--new-tokens",
                              "6"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    table = [ln.split() for ln in lines[2:]]
    assert [int(r[0]) for r in table] == [8, 16]
    for r in table:
        kernel_ms, kernel_step, torch_ms, torch_step, forward_ms, torch_ratio, forward_ratio = \
            map(float, r[1:])
        assert kernel_ms > 0 and torch_ms > 0 and forward_ms > 0
        assert abs(torch_ratio - torch_ms / kernel_ms) < 0.03 * torch_ratio + 0.01
        assert abs(forward_ratio - forward_ms / kernel_ms) < 0.03 * forward_ratio + 0.01
        # a step: the call over its longest response (1..6 tokens)
        assert kernel_ms / 6 - 0.01 <= kernel_step <= kernel_ms + 0.01
        assert abs(torch_step / kernel_step - torch_ratio) < 0.05 * torch_ratio + 0.02
    assert bench_decode.main(["--world", str(world), "--rows", "12"]) == 2          # not a multiple of 8
    assert bench_decode.main(["--world", "/nonexistent"]) == 2


def test_profile_counts_phases_and_reports(world):
    """bench.profile on shrunken shapes: every phase that did work has FLOPs, a CPU time, a GEMM limit
    measured in the run and a share of it; the report names the targets."""
    from bench import profile
    res = profile.run(world, steps=1, warmup=0, threads=1, prompts=2, group=4, max_new_tokens=6)
    for arm in ("dapo", "armor"):
        a = res[arm]
        assert a["steps"] == 1 and a["step_cpu_ms"] > 0
        # DAPO (dynamic sampling off) always updates; ARMOR on the untrained quick world may keep no prompt
        for ph in ("generate", "update") if arm == "dapo" else ("generate",):
            p = a["phases"][ph]
            assert p["gflop"] > 0 and p["cpu_ms"] > 0 and p["limit_gflops"] > 0 and 0 < p["share"]
        assert a["decode"]["ms_per_step"] > 0
    assert res["dapo"]["decode"]["rows"] == 8                       # 2 prompts x 4 responses in one call
    assert res["dapo"]["phases"]["logprob"]["gflop"] == 0          # DAPO without a KL monitor reads no πref
    assert res["config"]["fast_forward_used"] is True
    text = profile.format_report(res)
    assert res["config"]["decode_kernel"] == "native"
    for needle in ("GEMM lim", "decode", "DAPO update at", "ARMOR / DAPO step time", "lean forward on",
                   "compute.fast native"):
        assert needle in text
