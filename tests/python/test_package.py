"""The package itself: import without torch, error mapping, enums by name, configs and presets."""

import subprocess
import sys

import pytest

import megamoe


def test_imports_without_torch():
    code = "import sys, megamoe, megamoe.reference; assert 'torch' not in sys.modules, 'torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "kind, python_type, builtin",
    [
        ("InvalidArgument", megamoe.InvalidArgument, ValueError),
        ("Unsupported", megamoe.Unsupported, NotImplementedError),
        ("CudaError", megamoe.CudaError, RuntimeError),
        ("DeviceFault", megamoe.DeviceFault, RuntimeError),
        ("Error", megamoe.Error, Exception),
    ],
)
def test_cpp_errors_map_to_python_types_with_the_message(kind, python_type, builtin):
    with pytest.raises(python_type) as info:
        megamoe._core._throw(kind, "the rule of " + kind)
    assert isinstance(info.value, builtin)
    assert isinstance(info.value, megamoe.Error)
    assert "the rule of " + kind in str(info.value)


def test_invalid_argument_carries_argument_and_rule():
    with pytest.raises(megamoe.InvalidArgument) as info:
        megamoe._core._throw("InvalidArgument", "must be positive")
    assert info.value.argument == "some_argument"
    assert info.value.rule == "must be positive"
    assert str(info.value) == "megamoe: argument 'some_argument': must be positive (got a value)"


def test_other_errors_are_not_invalid_argument():
    with pytest.raises(megamoe.Unsupported) as info:
        megamoe._core._throw("Unsupported", "x")
    assert not isinstance(info.value, ValueError)


def test_config_accepts_enum_names_and_members():
    c = megamoe.MoEConfig(hidden=256, intermediate=128, num_experts=16, top_k=4,
                          weight_format="mxfp4", act_format=megamoe.Format.fp8,
                          fp8_scale="ue8m0", activation="swiglu_oai", num_ranks=4)
    assert c.weight_format == megamoe.Format.mxfp4
    assert c.act_format == megamoe.Format.fp8
    assert c.fp8_scale == megamoe.Fp8ScaleKind.ue8m0
    assert c.activation == megamoe.ActivationKind.swiglu_oai
    assert c.experts_per_rank == 4
    c.act_format = "bf16"
    assert c.act_format == megamoe.Format.bf16
    assert "mxfp4xbf16" in repr(c)


def test_bad_enum_name_names_the_argument_and_the_choices():
    with pytest.raises(megamoe.InvalidArgument) as info:
        megamoe.MoEConfig(weight_format="nvfp5")
    assert info.value.argument == "weight_format"
    assert "bf16, fp8, mxfp4, nvfp4" in str(info.value)
    assert "nvfp5" in str(info.value)
    c = megamoe.MoEConfig()
    with pytest.raises(megamoe.InvalidArgument, match="activation"):
        c.activation = "relu"


def test_presets():
    names = [p["name"] for p in megamoe.presets()]
    assert "dsv4-flash" in names
    c = megamoe.preset_config("dsv4-flash", num_ranks=8, max_tokens_per_rank=128)
    assert (c.hidden, c.intermediate, c.num_experts, c.top_k) == (4096, 2048, 256, 6)
    assert c.num_ranks == 8
    with pytest.raises(megamoe.InvalidArgument, match="dsv4-flash"):
        megamoe.find_preset("no-such-model")


def test_missing_area_says_so():
    with pytest.raises(AttributeError, match="no attribute"):
        megamoe.no_such_function  # noqa: B018


def test_precompile_fills_the_cache_with_the_configs_kernels(tmp_path, monkeypatch):
    # NVRTC only, no GPU: the same small config as tests/cpu/test_precompile.cpp.
    monkeypatch.setenv("MEGAMOE_CACHE_DIR", str(tmp_path))
    c = megamoe.MoEConfig(hidden=512, intermediate=512, num_experts=8, top_k=6, num_ranks=1,
                          max_tokens_per_rank=8, fp8_combine=True, activation="geglu")
    kernels = megamoe.precompile(c)
    names = [k["name"] for k in kernels]
    assert "sm90_nvfp4_mega_moe_pipelined" in names, names
    assert all(k["spill_bytes"] == 0 and k["local_bytes"] == 0 for k in kernels), kernels
    assert len(list(tmp_path.glob("*.jit"))) == len(kernels)
    # A fresh process, as a server starting later: every kernel comes from the disk cache.
    code = ("import megamoe; c = megamoe.MoEConfig(hidden=512, intermediate=512, num_experts=8, "
            "top_k=6, num_ranks=1, max_tokens_per_rank=8, fp8_combine=True, activation='geglu'); "
            "print(all(k['from_disk_cache'] for k in megamoe.precompile(c)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stdout + r.stderr
    with pytest.raises(megamoe.InvalidArgument):
        megamoe.precompile(megamoe.MoEConfig(hidden=512, intermediate=512, num_experts=8, top_k=0,
                                             max_tokens_per_rank=8))
