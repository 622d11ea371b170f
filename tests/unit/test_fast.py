"""The one switch of the CPU fast paths (common/fast/__init__.py): `auto` only where they were measured (one
process, CPU, float32), `off` never, `native` there or a ConfigError naming compute.fast."""
import pytest

from common import fast
from common.yaml_config import ConfigError

LEAN_AND_STATIC = fast.FastPaths(lean_forward=True, static_decode=True, decode_kernel=False)


def test_auto_takes_the_fast_paths_only_on_a_one_process_cpu_float32_run():
    assert fast.choose("auto", "cpu", "float32") == LEAN_AND_STATIC
    # GPUs, other dtypes and FSDP2 keep HF's forward and HF's decoding
    assert fast.choose("auto", "cuda", "float32") == fast.OFF
    assert fast.choose("auto", "cuda", "bfloat16") == fast.OFF
    assert fast.choose("auto", "cpu", "bfloat16") == fast.OFF
    assert fast.choose("auto", "cpu", "float32", distributed=True) == fast.OFF
    assert fast.choose("off", "cpu", "float32") == fast.OFF


@pytest.mark.parametrize("device,dtype,distributed,why", [
    ("cuda", "float32", False, "runs on cuda"),
    ("cpu", "bfloat16", False, "computes in bfloat16"),
    ("cpu", "float32", True, "runs on several ranks"),
])
def test_native_where_it_was_not_measured_fails_naming_the_key(device, dtype, distributed, why):
    with pytest.raises(ConfigError, match=f"compute.fast: 'native' cannot run: the run {why}"):
        fast.choose("native", device, dtype, distributed)


def test_an_unknown_mode_names_the_key():
    with pytest.raises(ConfigError, match=r"compute.fast: 'fastest' is not one of \['auto', 'off', "):
        fast.choose("fastest", "cpu", "float32")


def test_describe_says_what_decode_steps_compute_with():
    assert [p.describe() for p in (fast.OFF, LEAN_AND_STATIC, fast.FastPaths(True, True, True))] == \
        ["off", "torch", "native"]


def test_the_config_key_offers_the_switchs_modes():
    import typing

    from armor.config import ComputeConfig
    assert typing.get_args(typing.get_type_hints(ComputeConfig)["fast"]) == fast.MODES
