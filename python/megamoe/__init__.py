"""megamoe: fused expert-parallel Mixture-of-Experts layers for Hopper.

The C++ API through nanobind. Arrays cross as DLPack (torch, JAX, CuPy, NumPy) without copies;
errors are megamoe.InvalidArgument (a ValueError), Unsupported (NotImplementedError), CudaError
and DeviceFault (RuntimeError), with the C++ message. The CPU parts (formats, planner,
heuristics, the oracle in megamoe.reference) need no GPU. megamoe.torch adds torch.library ops.
"""

import sys as _sys

from ._errors import CudaError, DeviceFault, Error, InvalidArgument, Unsupported  # noqa: F401
from . import _core
from ._core import (  # noqa: F401
    ActivationKind,
    DType,
    Format,
    Fp8ScaleKind,
    MoEConfig,
    ScaleLayout,
    describe,
    dtype_size,
    find_preset,
    presets,
)

__version__ = "0.1.0"

#: Areas of the C++ API compiled into this build (python/CMakeLists.txt binds an area once the
#: library implements it).
areas = frozenset(a for a in _core.areas.split(",") if a)

# Functions of the GPU API, re-exported when their area is built.
_AREA_NAMES = {
    "planner": ["BufferRegion", "SymmBufferPlan", "plan_symm_buffer"],
    "buffer": ["SymmBuffer", "get_symm_buffer_for_mega_moe"],
    "heuristics": ["get_block_m_for_mega_moe", "reachable_block_ms", "block_m_regime_ends",
                   "set_num_sms", "get_num_sms", "resolve_num_sms"],
    "pre_dispatch": ["mega_moe_pre_dispatch", "read_and_clear_dispatch_errors"],
    "nvfp4": ["nvfp4_kernel_weight_bytes", "transform_weights_for_mega_moe",
              "transform_ue4m3_sf_into_required_layout", "nvfp4_mega_moe"],
    "families": ["fp8_mega_moe", "mxfp4_mega_moe", "bf16_mega_moe"],
    "side_lora": ["side_lora_saved_pool_bytes", "side_lora_scratch_bytes",
                  "side_lora_mega_moe_forward", "side_lora_mega_moe_backward"],
}
for _area, _names in _AREA_NAMES.items():
    if _area in areas:
        for _name in _names:
            globals()[_name] = getattr(_core, _name)

if "formats" in areas:
    formats = _core.formats
    _sys.modules[__name__ + ".formats"] = formats


def preset_config(name, **overrides):
    """MoEConfig with the shape of a preset ('dsv4-flash', ...) and any other field as keyword."""
    p = find_preset(name)
    fields = {k: p[k] for k in ("hidden", "intermediate", "num_experts", "top_k")}
    fields.update(overrides)
    return MoEConfig(**fields)


def __getattr__(name):
    for area, names in _AREA_NAMES.items():
        if name in names:
            raise AttributeError(
                f"megamoe.{name} is not in this build: the C++ library does not implement the "
                f"'{area}' area yet (built areas: {sorted(areas)})")
    raise AttributeError(f"module 'megamoe' has no attribute '{name}'")
