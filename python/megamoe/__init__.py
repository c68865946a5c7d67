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

# Functions of the GPU API, re-exported from the extension.
for _name in (
    "BufferRegion", "SymmBufferPlan", "plan_symm_buffer",
    "SymmBuffer", "get_symm_buffer_for_mega_moe",
    "get_block_m_for_mega_moe", "reachable_block_ms", "block_m_regime_ends",
    "get_device_choice_block_m_for_mega_moe", "tile_choice_percent",
    "tile_choice_for_route_counts", "tile_choice_min_gain_passes",
    "set_num_sms", "get_num_sms", "resolve_num_sms",
    "mega_moe_pre_dispatch", "read_and_clear_dispatch_errors",
    "nvfp4_kernel_weight_bytes", "transform_weights_for_mega_moe",
    "transform_ue4m3_sf_into_required_layout", "nvfp4_mega_moe",
    "fp8_mega_moe", "mxfp4_mega_moe", "bf16_mega_moe",
    "side_lora_saved_pool_bytes", "side_lora_scratch_bytes",
    "side_lora_mega_moe_forward", "side_lora_mega_moe_backward",
    "precompile",
):
    globals()[_name] = getattr(_core, _name)

formats = _core.formats
_sys.modules[__name__ + ".formats"] = formats


def preset_config(name, **overrides):
    """MoEConfig with the shape of a preset ('dsv4-flash', ...) and any other field as keyword."""
    p = find_preset(name)
    fields = {k: p[k] for k in ("hidden", "intermediate", "num_experts", "top_k")}
    fields.update(overrides)
    return MoEConfig(**fields)
