"""megamoe.torch: the GPU calls for PyTorch users.

* The launches are ``torch.library`` custom ops (``torch.ops.megamoe.*``) with fake
  implementations, so ``torch.compile`` traces them; eager calls of ``mega_moe_pre_dispatch`` and
  ``nvfp4_mega_moe`` run the same function without the dispatcher (``_direct``). Every call
  launches on ``torch.cuda.current_stream()`` and never synchronizes, so CUDA-graph capture
  records it.
* ``get_symm_buffer_for_mega_moe`` returns a ``SymmBuffer`` whose named regions are torch tensors
  (views of the device memory, no copies).
* ``transform_weights_for_mega_moe`` allocates the kernel layout and fills it (once, at load).
* ``SideLoraMegaMoE`` (an ``nn.Module``) and ``SideLoraFunction`` (``autograd.Function``) run the
  training family with the fused backward (gradients for the adapters, x and the route weights).

Importing this module imports torch; ``import megamoe`` alone never does.
"""

import itertools
import weakref
from typing import List, Optional, Sequence

import torch

import megamoe
from megamoe import _core

__all__ = [
    "SymmBuffer",
    "get_symm_buffer_for_mega_moe",
    "mega_moe_pre_dispatch",
    "read_and_clear_dispatch_errors",
    "transform_weights_for_mega_moe",
    "transform_ue4m3_sf_into_required_layout",
    "nvfp4_mega_moe",
    "fp8_mega_moe",
    "mxfp4_mega_moe",
    "bf16_mega_moe",
    "get_block_m_for_mega_moe",
    "set_num_sms",
    "SideLoraFunction",
    "SideLoraMegaMoE",
]

get_block_m_for_mega_moe = getattr(_core, "get_block_m_for_mega_moe", None)
set_num_sms = getattr(_core, "set_num_sms", None)


# The current stream's handle without building a torch.cuda.Stream: ~0.4 against ~3 us a call
# (bench/python_host_launch.py, run 257). torch's own generated code (inductor) reads it this
# way; older or other builds without it take the public route.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(device: torch.device) -> int:
    if device.type == "cuda" and device.index is not None and _raw_stream is not None:
        return _raw_stream(device.index)
    # A host tensor is rejected by the library's validation; name the current GPU's stream so
    # that the error is megamoe's InvalidArgument, not torch's.
    return torch.cuda.current_stream(device if device.type == "cuda" else None).cuda_stream


def _arg(t: Optional[torch.Tensor]):
    """A tensor as a DLPack capsule for the extension. torch.utils.dlpack.to_dlpack rather than
    Tensor.__dlpack__, which may make the legacy stream wait on the current one and so break
    CUDA-graph capture. Detached (DLPack refuses grad-requiring tensors); one-byte formats torch
    may not export (float8, float4 pairs) go as uint8. No copies."""
    if t is None:
        return None
    t = t.detach()
    if t.element_size() == 1 and t.dtype not in (torch.uint8, torch.int8):
        t = t.view(torch.uint8)
    return torch.utils.dlpack.to_dlpack(t)


def _tensor(array) -> torch.Tensor:
    """A DLPack array of the extension (a region view) as a torch tensor, no copy."""
    # The extension hands out either DLPack capsules or objects with __dlpack__; from_dlpack
    # takes both.
    return torch.utils.dlpack.from_dlpack(array)


def _args(d):
    return {k: (_arg(v) if isinstance(v, torch.Tensor) else v) for k, v in d.items()}


# ---- the symmetric buffer ------------------------------------------------------------------
# Custom ops cannot take the C++ buffer object, so they take its id in this registry plus the
# rank buffers as mutated tensors (which orders them correctly under torch.compile).
_BUFFERS: "weakref.WeakValueDictionary[int, SymmBuffer]" = weakref.WeakValueDictionary()
_NEXT_ID = itertools.count(1)


class SymmBuffer:
    """A planned and allocated symmetric buffer, with its regions as torch tensors.

    ``buffer.x``, ``buffer.topk_idx``, ... are the regions of the first driven rank;
    ``buffer.view(name, rank)`` / ``buffer.views(rank)`` give any rank's. ``buffer.core`` is the
    extension's object for the functions of ``megamoe`` itself.
    """

    def __init__(self, core):
        self.core = core
        self.plan = core.plan
        self.config = core.plan.config
        # Plain ints, so that torch.compile can trace code that reads them.
        self.hidden = int(self.config.hidden)
        self.num_ranks = core.num_ranks
        self.driven_ranks = list(core.driven_ranks)
        # One uint8 tensor per driven rank: the memory the ops declare as mutated.
        self.memory = [_tensor(core.rank_buffer(r)) for r in self.driven_ranks]
        self.device = self.memory[0].device
        self.id = next(_NEXT_ID)
        _BUFFERS[self.id] = self

    def view(self, name: str, rank: Optional[int] = None) -> torch.Tensor:
        return _tensor(self.core.view(self.driven_ranks[0] if rank is None else rank, name))

    def views(self, rank: Optional[int] = None) -> dict:
        r = self.driven_ranks[0] if rank is None else rank
        return {name: _tensor(v) for name, v in self.core.views(r).items()}

    def __getattr__(self, name):
        core = self.__dict__.get("core")
        if core is not None and core.plan.has(name):
            return self.view(name)
        raise AttributeError(f"SymmBuffer has no attribute or region '{name}'")

    def __repr__(self):
        return (f"SymmBuffer({megamoe.describe(self.config)}, provider={self.core.provider}, "
                f"{self.plan.total_bytes} bytes per rank)")


def get_symm_buffer_for_mega_moe(config, provider: str = "local", nccl_comm: int = 0):
    """Plans and allocates the buffer on the current CUDA device (provider 'local': the
    config's num_ranks virtual ranks on this GPU; 'nccl': nccl_comm is the ncclComm_t)."""
    torch.cuda.current_device()  # the driver's context is the primary one torch also uses
    return SymmBuffer(_core.get_symm_buffer_for_mega_moe(config, provider, nccl_comm))


def _buffer(buffer_id: int) -> SymmBuffer:
    try:
        return _BUFFERS[buffer_id]
    except KeyError:
        raise megamoe.InvalidArgument(
            f"megamoe: argument 'buffer': no live SymmBuffer with id {buffer_id}",
            "buffer", "must be a live SymmBuffer") from None


# ---- eager calls ---------------------------------------------------------------------------
def _direct(tensor: torch.Tensor) -> bool:
    """Whether a layer call runs its function itself instead of through torch.ops: yes for plain
    tensors outside torch.compile's tracing. The custom ops' dispatcher costs ~50-60 us of host
    time a layer call (run 257 at dsv4-flash T = 1: 92 us through torch.ops, 28 us this way; an op
    with the MoE op's argument lists that does nothing 33 us; bench/python_host_launch.py) and
    buys eager code only the version bumps of the tensors the call writes, which _written makes
    itself. Traced code (torch.compile, make_fx) and tensor subclasses (fake, proxy) go through
    the ops, whose fake implementations they need."""
    return type(tensor) is torch.Tensor and not torch.compiler.is_compiling()


def _written(tensors) -> None:
    """Bumps the version counters of tensors a call wrote, as a custom op that mutates them does,
    so that autograd refuses a backward that saved one of them before the call (inference tensors
    have none)."""
    for t in tensors:
        if not t.is_inference():
            torch.autograd.graph.increment_version(t)


# ---- pre-dispatch ----------------------------------------------------------------------------
def _run_pre_dispatch(buf: "SymmBuffer", x, topk_idx, topk_weights, expert_scales, rank):
    _core.mega_moe_pre_dispatch(buf.core, _arg(x), _arg(topk_idx), _arg(topk_weights),
                                expert_scales=_arg(expert_scales), rank=rank,
                                stream=_stream(x.device))


@torch.library.custom_op("megamoe::pre_dispatch", mutates_args=("memory",))
def _pre_dispatch_op(buffer_id: int, memory: List[torch.Tensor], x: torch.Tensor,
                     topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                     expert_scales: Optional[torch.Tensor], rank: int) -> None:
    _run_pre_dispatch(_buffer(buffer_id), x, topk_idx, topk_weights, expert_scales, rank)


@_pre_dispatch_op.register_fake
def _(buffer_id, memory, x, topk_idx, topk_weights, expert_scales, rank):
    return None


def mega_moe_pre_dispatch(buffer: SymmBuffer, x: torch.Tensor, topk_idx: torch.Tensor,
                          topk_weights: torch.Tensor, expert_scales=None,
                          rank: Optional[int] = None) -> None:
    """Quantizes bf16 tokens x [T, H] and their routing into rank's input region (default: the
    first rank this process drives)."""
    rank = buffer.driven_ranks[0] if rank is None else rank
    if _direct(x):
        _run_pre_dispatch(buffer, x, topk_idx, topk_weights, expert_scales, rank)
        _written(buffer.memory)
        return
    torch.ops.megamoe.pre_dispatch(buffer.id, buffer.memory, x, topk_idx, topk_weights,
                                   expert_scales, rank)


def read_and_clear_dispatch_errors(buffer: SymmBuffer, rank: Optional[int] = None) -> int:
    """Count of out-of-range or repeated expert ids pre-dispatch saw on rank.

    Synchronizes the stream and zeroes the counter."""
    rank = buffer.driven_ranks[0] if rank is None else rank
    return _core.read_and_clear_dispatch_errors(buffer.core, rank, _stream(buffer.device))


# ---- NVFP4 weights ---------------------------------------------------------------------------
_KERNEL_FIELDS = ("w13", "w13_sf", "w2", "w2_sf", "fc1_alpha", "fc2_alpha", "fc2_input_scale")


def transform_weights_for_mega_moe(config, checkpoint: dict, sf_layout=None) -> dict:
    """Checkpoint NVFP4 weights of one rank's experts {w13, w13_sf, w13_global, w2, w2_sf,
    w2_global, fc2_input_scale} (device tensors) -> a dict in the kernel layout."""
    device = checkpoint["w13"].device
    sizes = _core.nvfp4_kernel_weight_bytes(config)
    e_local = config.experts_per_rank
    out = {name: torch.empty(sizes[name], dtype=torch.uint8, device=device)
           for name in ("w13", "w13_sf", "w2", "w2_sf")}
    for name in ("fc1_alpha", "fc2_alpha", "fc2_input_scale"):
        out[name] = torch.empty(e_local, dtype=torch.float32, device=device)
    _core.transform_weights_for_mega_moe(config, _args(checkpoint), _args(out), sf_layout=sf_layout,
                                         stream=_stream(device))
    return out


def transform_ue4m3_sf_into_required_layout(sf: torch.Tensor, from_layout,
                                            out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """UE4M3 scales in `from_layout` ('row_major' or 'swizzled_128x4') -> the kernel's layout,
    written to `out` ([rows, cols] or [experts, rows, cols] uint8). `out` may be left out for
    row-major input (it then takes sf's shape); swizzled input has no row/column shape of its
    own, so it needs `out`."""
    if out is None:
        if getattr(from_layout, "name", from_layout) != "row_major":
            raise megamoe.InvalidArgument(
                "megamoe: argument 'out': must be given for swizzled input (its shape is the "
                "[rows, cols] of the scales)", "out", "must be given for swizzled input")
        out = torch.empty(sf.shape, dtype=torch.uint8, device=sf.device)
    _core.transform_ue4m3_sf_into_required_layout(_arg(sf), from_layout, _arg(out),
                                                  stream=_stream(sf.device))
    return out


# ---- the fused layers ------------------------------------------------------------------------
# id(weights dict) -> (weak references to its tensors, their data pointers and shapes, the
# extension's views of them): made once, checked on every eager call.
_WEIGHT_VIEWS: dict = {}
_MAX_WEIGHT_VIEWS = 256


def _weight_views(w):
    """The extension's views of a weight dict's tensors, taken once: handing the seven over by
    DLPack costs ~1-2 us a tensor a call, the check below ~3 us for all seven (run 257). Taken
    again when the dict holds other tensors, or one of them moved its data or changed its shape
    (set_, resize_); the views keep nothing alive, so a tensor that died fails the identity
    check."""
    tensors = [w[name] for name in _KERNEL_FIELDS]
    entry = _WEIGHT_VIEWS.get(id(w))
    if entry is not None:
        refs, marks, views = entry
        if all(r() is t and m == (t.data_ptr(), t.shape)
               for r, t, m in zip(refs, tensors, marks)):
            return views
    views = _core.Nvfp4KernelWeightViews(dict(zip(_KERNEL_FIELDS, (_arg(t) for t in tensors))))
    if len(_WEIGHT_VIEWS) >= _MAX_WEIGHT_VIEWS:
        _WEIGHT_VIEWS.clear()
    _WEIGHT_VIEWS[id(w)] = ([weakref.ref(t) for t in tensors],
                            [(t.data_ptr(), t.shape) for t in tensors], views)
    return views


def _run_nvfp4(buf: "SymmBuffer", weights, out, ranks, max_tokens_across_ranks):
    """weights: one per output, a dict of DLPack capsules or the extension's views of one."""
    _core.nvfp4_mega_moe(buf.core, weights, [_arg(o) for o in out], rank=list(ranks),
                         stream=_stream(out[0].device),
                         max_tokens_across_ranks=max_tokens_across_ranks)


@torch.library.custom_op("megamoe::nvfp4_mega_moe", mutates_args=("memory", "out"))
def _nvfp4_op(buffer_id: int, memory: List[torch.Tensor], w13: List[torch.Tensor],
              w13_sf: List[torch.Tensor], w2: List[torch.Tensor], w2_sf: List[torch.Tensor],
              fc1_alpha: List[torch.Tensor], fc2_alpha: List[torch.Tensor],
              fc2_input_scale: List[torch.Tensor], out: List[torch.Tensor],
              ranks: List[int], max_tokens_across_ranks: int = 0) -> None:
    fields = (w13, w13_sf, w2, w2_sf, fc1_alpha, fc2_alpha, fc2_input_scale)
    weights = [dict(zip(_KERNEL_FIELDS, (_arg(f[i]) for f in fields))) for i in range(len(out))]
    _run_nvfp4(_buffer(buffer_id), weights, out, ranks, max_tokens_across_ranks)


@_nvfp4_op.register_fake
def _(buffer_id, memory, w13, w13_sf, w2, w2_sf, fc1_alpha, fc2_alpha, fc2_input_scale, out,
      ranks, max_tokens_across_ranks=0):
    return None


def _outputs(buffer, num_tokens, out, n):
    if out is not None:
        return list(out) if isinstance(out, (list, tuple)) else [out]
    if num_tokens is None:
        raise megamoe.InvalidArgument(
            "megamoe: argument 'num_tokens': must be given when out is not "
            "(the token count of the last pre-dispatch)", "num_tokens", "must be given")
    counts = list(num_tokens) if isinstance(num_tokens, (list, tuple)) else [num_tokens] * n
    return [torch.empty(t, buffer.hidden, dtype=torch.bfloat16, device=buffer.device)
            for t in counts]


def _weight_lists(weights):
    return list(weights) if isinstance(weights, (list, tuple)) else [weights]


def _ranks(buffer, ranks, single, n):
    """The ranks of a layer call: as given (an int or a list), else the driven ranks."""
    if ranks is None:
        return buffer.driven_ranks[:1] if single else buffer.driven_ranks[:n]
    return [ranks] if isinstance(ranks, int) else list(ranks)


def nvfp4_mega_moe(buffer: SymmBuffer, weights, num_tokens=None, out=None, ranks=None,
                   max_tokens_across_ranks=None):
    """Runs the NVFP4 layer on the last pre-dispatch. `weights`: the dict of
    transform_weights_for_mega_moe, or a list of them (one per rank in `ranks`, default the
    driven ranks). Returns out bf16 [T, H] (a list when weights is a list); T = num_tokens (an
    int, or one count per rank: ragged batches, 0 for an idle rank). max_tokens_across_ranks:
    the largest count any rank passes in this call, where known (one process per GPU: every
    rank then takes BLOCK_M from it, not from its own count)."""
    single = not isinstance(weights, (list, tuple))
    ws = _weight_lists(weights)
    ranks = _ranks(buffer, ranks, single, len(ws))
    outs = _outputs(buffer, num_tokens, out, len(ws))
    max_tokens = int(max_tokens_across_ranks or 0)
    if _direct(outs[0]):
        _run_nvfp4(buffer, [_weight_views(w) for w in ws], outs, ranks, max_tokens)
        _written(buffer.memory)
        _written(outs)
        return outs[0] if single else outs
    fields = [[w[name] for w in ws] for name in _KERNEL_FIELDS]
    torch.ops.megamoe.nvfp4_mega_moe(buffer.id, buffer.memory, *fields, outs, list(ranks),
                                     max_tokens)
    return outs[0] if single else outs


def _family_op(name, fields):
    """Registers megamoe::<name> for a family whose weights are dicts with `fields`."""

    def impl(buffer_id: int, memory: List[torch.Tensor], weights: List[torch.Tensor],
             out: List[torch.Tensor], ranks: List[int]) -> None:
        buf = _buffer(buffer_id)
        k = len(fields)
        ws = [dict(zip(fields, (_arg(t) for t in weights[i * k:(i + 1) * k])))
              for i in range(len(out))]
        getattr(_core, name)(buf.core, ws, [_arg(o) for o in out], rank=list(ranks),
                             stream=_stream(out[0].device))

    op = torch.library.custom_op(f"megamoe::{name}", impl, mutates_args=("memory", "out"))
    op.register_fake(lambda buffer_id, memory, weights, out, ranks: None)

    def call(buffer: SymmBuffer, weights, num_tokens=None, out=None, ranks=None):
        single = not isinstance(weights, (list, tuple))
        ws = _weight_lists(weights)
        ranks = _ranks(buffer, ranks, single, len(ws))
        outs = _outputs(buffer, num_tokens, out, len(ws))
        flat = [w[f] for w in ws for f in fields]
        getattr(torch.ops.megamoe, name)(buffer.id, buffer.memory, flat, outs, list(ranks))
        return outs[0] if single else outs

    call.__name__ = name
    call.__doc__ = f"Runs {name} on the last pre-dispatch; weights dict(s) with {fields}."
    return call


if hasattr(_core, "fp8_mega_moe"):
    fp8_mega_moe = _family_op("fp8_mega_moe", ("w13", "w13_sf", "w2", "w2_sf"))
    mxfp4_mega_moe = _family_op("mxfp4_mega_moe", ("w13", "w13_sf", "w2", "w2_sf"))
    bf16_mega_moe = _family_op("bf16_mega_moe", ("w13", "w2"))


# ---- side-LoRA training ----------------------------------------------------------------------
_ADAPTERS = ("a1", "a3", "b1", "b3", "a2", "b2")


def _base_dict(w13, w13_sf, w2, w2_sf):
    d = {"w13": _arg(w13), "w2": _arg(w2)}
    if w13_sf is not None:
        d["w13_sf"], d["w2_sf"] = _arg(w13_sf), _arg(w2_sf)
    return d


def _empty_like_or_none(t, dtype=torch.float32):
    return None if t is None else torch.empty(t.shape, dtype=dtype, device=t.device)


class SideLoraFunction(torch.autograd.Function):
    """out = side-LoRA MegaMoE(x) for one rank; gradients for x, topk_weights and the adapters.

    The forward pre-dispatches x into the buffer and runs the fused forward; the backward runs
    the fused backward from what the forward saved. Base weights are frozen (no gradient).
    """

    @staticmethod
    def forward(ctx, buffer, rank, scale, base, x, topk_idx, topk_weights, a1, a3, b1, b3, a2,
                b2):
        plan = buffer.plan
        r, t, device = buffer.config.lora_rank, x.shape[0], x.device
        tied = a3 is None
        saved = {
            "x_a": torch.empty(t, r if tied else 2 * r, dtype=torch.float32, device=device),
            "z": torch.empty(t, r, dtype=torch.float32, device=device),
            "pool": torch.empty(_core.side_lora_saved_pool_bytes(plan), dtype=torch.uint8,
                                device=device),
        }
        adapters = {k: v for k, v in zip(_ADAPTERS, (a1, a3, b1, b3, a2, b2)) if v is not None}
        adapters.update(scale=float(scale), tied_a13=tied)
        out = torch.empty(t, buffer.config.hidden, dtype=torch.bfloat16, device=device)
        mega_moe_pre_dispatch(buffer, x.detach(), topk_idx, topk_weights.detach(), rank=rank)
        _core.side_lora_mega_moe_forward(buffer.core, _base_dict(*base), _args(adapters), _arg(out),
                                         _args(saved), rank=rank, stream=_stream(device))
        ctx.buffer, ctx.rank, ctx.base, ctx.adapters, ctx.saved = buffer, rank, base, adapters, saved
        ctx.save_for_backward(x, topk_idx, topk_weights, a1, a3, b1, b3, a2, b2)
        return out

    @staticmethod
    def backward(ctx, d_out):
        x, topk_idx, topk_weights, a1, a3, b1, b3, a2, b2 = ctx.saved_tensors
        plan, device = ctx.buffer.plan, x.device
        grads = {
            "dx": torch.empty_like(x, dtype=torch.bfloat16),
            "d_topk_weights": torch.empty(topk_weights.shape, dtype=torch.float32, device=device),
            "da1": _empty_like_or_none(a1), "db1": _empty_like_or_none(b1),
            "db3": _empty_like_or_none(b3), "da2": _empty_like_or_none(a2),
            "db2": _empty_like_or_none(b2),
        }
        if a3 is not None:
            grads["da3"] = _empty_like_or_none(a3)
        scratch = torch.empty(_core.side_lora_scratch_bytes(plan), dtype=torch.uint8,
                              device=device)
        _core.side_lora_mega_moe_backward(
            ctx.buffer.core, _arg(x), _arg(topk_idx), _arg(topk_weights),
            _arg(d_out.to(torch.bfloat16).contiguous()), _base_dict(*ctx.base), _args(ctx.adapters),
            _args(ctx.saved), _arg(scratch), _args(grads), rank=ctx.rank, stream=_stream(device))
        return (None, None, None, None, grads["dx"].to(x.dtype),
                None, grads["d_topk_weights"].to(topk_weights.dtype),
                grads["da1"].to(a1.dtype), None if a3 is None else grads["da3"].to(a3.dtype),
                grads["db1"].to(b1.dtype), grads["db3"].to(b3.dtype), grads["da2"].to(a2.dtype),
                grads["db2"].to(b2.dtype))


class SideLoraMegaMoE(torch.nn.Module):
    """A side-LoRA MoE layer of one rank: frozen base weights (bf16 or mxfp4) and trainable bf16
    adapters. forward(x, topk_idx, topk_weights) -> out bf16 [T, H]."""

    def __init__(self, config, buffer: Optional[SymmBuffer] = None, *, rank: int = 0,
                 scale: float = 1.0, tied: bool = False, base: Sequence = (),
                 device=None):
        super().__init__()
        if not config.side_lora:
            raise megamoe.InvalidArgument(
                "megamoe: argument 'config.side_lora': must be true for SideLoraMegaMoE",
                "config.side_lora", "must be true")
        self.config, self.rank, self.scale, self.tied = config, rank, scale, tied
        self.buffer = buffer or get_symm_buffer_for_mega_moe(config)
        h, i, r = config.hidden, config.intermediate, config.lora_rank
        e = config.experts_per_rank
        device = device or self.buffer.device

        def param(*shape):
            return torch.nn.Parameter(torch.zeros(*shape, dtype=torch.bfloat16, device=device))

        self.a1 = param(h, r)
        self.a3 = None if tied else param(h, r)
        self.b1, self.b3 = param(e, r, i), param(e, r, i)
        self.a2, self.b2 = param(e, i, r), param(r, h)
        # (w13, w13_sf, w2, w2_sf): frozen, so buffers rather than parameters.
        w13, w13_sf, w2, w2_sf = (tuple(base) + (None,) * 4)[:4]
        for name, t in zip(("w13", "w13_sf", "w2", "w2_sf"), (w13, w13_sf, w2, w2_sf)):
            self.register_buffer(name, t, persistent=True)

    def forward(self, x, topk_idx, topk_weights):
        base = (self.w13, self.w13_sf, self.w2, self.w2_sf)
        return SideLoraFunction.apply(self.buffer, self.rank, self.scale, base, x, topk_idx,
                                      topk_weights, self.a1, self.a3, self.b1, self.b3, self.a2,
                                      self.b2)
