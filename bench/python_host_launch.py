"""What the host spends on one eager layer call made from Python through megamoe.torch (no CUDA
graph), against the same calls into the extension directly: the price of the Python layer, the
torch.library dispatcher and the DLPack hand-over, beside the C++ calls' own (bench_host_launch).

Rows, per call, median of 9 batches of 100 calls enqueued behind each other on the current
stream (the GPU drained between batches, never inside one), with the batches' range:

  megamoe.torch  mega_moe_pre_dispatch + nvfp4_mega_moe(out=...), and each alone;
  torch.ops      the custom ops called directly (torch.ops.megamoe.*), as torch.compile'd code
                 and older releases of megamoe.torch run them;
  extension      megamoe._core's functions with DLPack capsules made per call (the floor of any
                 Python path that hands tensors over by DLPack);
  parts          pieces of the Python path (one tensor handed over by DLPack, the current
                 stream's handle two ways, the weight views' check, a version bump) and one custom
                 op with the MoE op's argument lists that does nothing (the dispatcher's share).

Weights are random valid NVFP4 codes and scales written straight in the kernel layout.

  python3 bench/python_host_launch.py [--presets dsv4-flash,h6144-e256-k8] [--tokens 1,128]
                                      [--out FILE.md]
"""

import argparse
import statistics
import sys
import time
from typing import List

import torch

import megamoe
import megamoe.torch as mt
from megamoe import _core

BATCHES = 9
CALLS = 100


def timed(body):
    """Median and range over BATCHES batches of CALLS calls, in us per call."""
    for _ in range(3):
        body()
    torch.cuda.synchronize()
    us = []
    for _ in range(BATCHES):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            body()
        us.append((time.perf_counter() - t0) * 1e6 / CALLS)
        torch.cuda.synchronize()
    us.sort()
    return statistics.median(us), us[0], us[-1]


@torch.library.custom_op("megamoe_bench::nothing", mutates_args=("memory", "out"))
def _nothing(buffer_id: int, memory: List[torch.Tensor], w13: List[torch.Tensor],
             w13_sf: List[torch.Tensor], w2: List[torch.Tensor], w2_sf: List[torch.Tensor],
             fc1_alpha: List[torch.Tensor], fc2_alpha: List[torch.Tensor],
             fc2_input_scale: List[torch.Tensor], out: List[torch.Tensor], ranks: List[int],
             max_tokens_across_ranks: int = 0) -> None:
    return None


def random_kernel_weights(config, device):
    sizes = _core.nvfp4_kernel_weight_bytes(config)
    gen = torch.Generator(device=device).manual_seed(20261201)

    def codes(n):
        return torch.randint(0, 256, (n,), dtype=torch.uint8, device=device, generator=gen)

    def scales(n):
        # Valid re-encoded scale bytes: exponent field 13..21, any mantissa (as the C++ benches).
        b = torch.randint(0, 256, (n,), dtype=torch.int32, device=device, generator=gen)
        return ((((13 + b % 9) << 3) | (b & 7)) & 0xFF).to(torch.uint8)

    e = config.experts_per_rank
    return {
        "w13": codes(sizes["w13"]), "w13_sf": scales(sizes["w13_sf"]),
        "w2": codes(sizes["w2"]), "w2_sf": scales(sizes["w2_sf"]),
        "fc1_alpha": torch.full((e,), 1 / 512, device=device),
        "fc2_alpha": torch.full((e,), 1 / 512, device=device),
        "fc2_input_scale": torch.full((e,), 0.05, device=device),
    }


def rows_for(preset, tokens, device):
    config = megamoe.preset_config(preset, num_ranks=1, max_tokens_per_rank=512,
                                   weight_format="nvfp4", act_format="nvfp4")
    h, k, e = config.hidden, config.top_k, config.num_experts
    weights = random_kernel_weights(config, device)
    buf = mt.get_symm_buffer_for_mega_moe(config)
    gen = torch.Generator(device=device).manual_seed(tokens)
    x = torch.randn(tokens, h, device=device, generator=gen).to(torch.bfloat16)
    idx = torch.rand(tokens, e, device=device, generator=gen).argsort(dim=1)[:, :k].contiguous()
    w = torch.rand(tokens, k, device=device, generator=gen).softmax(dim=1)
    out = torch.empty(tokens, h, dtype=torch.bfloat16, device=device)
    fields = [[weights[n]] for n in mt._KERNEL_FIELDS]
    stream = torch.cuda.current_stream().cuda_stream
    a = mt._arg

    def api_pre():
        mt.mega_moe_pre_dispatch(buf, x, idx, w)

    def api_moe():
        mt.nvfp4_mega_moe(buf, weights, out=out)

    def ops_pre():
        torch.ops.megamoe.pre_dispatch(buf.id, buf.memory, x, idx, w, None, 0)

    def ops_moe():
        torch.ops.megamoe.nvfp4_mega_moe(buf.id, buf.memory, *fields, [out], [0], 0)

    def ext_pre():
        _core.mega_moe_pre_dispatch(buf.core, a(x), a(idx), a(w), expert_scales=None, rank=0,
                                    stream=stream)

    def ext_moe():
        _core.nvfp4_mega_moe(buf.core, [{n: a(weights[n]) for n in mt._KERNEL_FIELDS}],
                             [a(out)], rank=[0], stream=stream, max_tokens_across_ranks=0)

    def both(p, m):
        def call():
            p()
            m()
        return call

    rows = [
        ("megamoe.torch: pre-dispatch + MoE", timed(both(api_pre, api_moe))),
        ("megamoe.torch: pre-dispatch alone", timed(api_pre)),
        ("megamoe.torch: MoE alone", timed(api_moe)),
        ("torch.ops: pre-dispatch + MoE", timed(both(ops_pre, ops_moe))),
        ("extension: pre-dispatch + MoE", timed(both(ext_pre, ext_moe))),
        ("extension: pre-dispatch alone", timed(ext_pre)),
        ("extension: MoE alone", timed(ext_moe)),
        ("part: megamoe.torch._arg of one tensor (to_dlpack)", timed(lambda: a(out))),
        ("part: megamoe.torch._stream (the current stream's handle)",
         timed(lambda: mt._stream(out.device))),
        ("part: torch.cuda.current_stream(device).cuda_stream",
         timed(lambda: torch.cuda.current_stream(out.device).cuda_stream)),
        ("part: torch._C._cuda_getCurrentRawStream", timed(
            lambda: torch._C._cuda_getCurrentRawStream(out.device.index))),
        ("part: data_ptr() and shape of one tensor", timed(lambda: (out.data_ptr(), out.shape))),
        ("part: data_ptr() of one tensor", timed(lambda: out.data_ptr())),
        ("part: megamoe.torch._weight_views of a cached dict", timed(
            lambda: mt._weight_views(weights))),
        ("part: megamoe.torch._written of one tensor", timed(lambda: mt._written((out,)))),
        ("part: megamoe.torch._direct", timed(lambda: mt._direct(out))),
        ("part: a custom op with the MoE op's lists, doing nothing",
         timed(lambda: torch.ops.megamoe_bench.nothing(buf.id, buf.memory, *fields, [out], [0],
                                                       0))),
    ]
    torch.cuda.synchronize()
    return f"{preset}, T = {tokens}", rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="dsv4-flash,h6144-e256-k8")
    p.add_argument("--tokens", default="1,128")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("python_host_launch: no CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    tables = [rows_for(pr, int(t), device) for pr in args.presets.split(",")
              for t in args.tokens.split(",")]
    lines = [f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
             f"Python {sys.version.split()[0]}"]
    for title, rows in tables:
        lines += ["", title, "", "| call | us per call | range over the batches |",
                  "|---|---|---|"]
        lines += [f"| {name} | {m:.2f} | {lo:.2f}-{hi:.2f} |" for name, (m, lo, hi) in rows]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
