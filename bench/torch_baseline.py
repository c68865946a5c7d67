#!/usr/bin/env python3
"""PyTorch BF16 MoE baseline of ../shared/BENCHMARKS.md, timed on the current GPU.

The unfused pipeline a user runs today: sort routes by expert -> torch._grouped_mm (W13) ->
SwiGLU -> torch._grouped_mm (W2) -> weighted scatter-add. One GPU, all experts local. Times are
the median of CUDA-graph replays; weights are random bf16 (never zeros). Prints one JSON object
per line: {"preset", "tokens", "routing", "baseline_us", "impl"}.

With --routes FILE the baseline runs the caller's routing instead of drawing one: a JSON object
{"tokens": T, "top_k": K, "topk_idx": [T*K ints, -1 = masked], "topk_weights": [T*K floats]}
(`megamoe demo` writes it, so that both sides of its ratio route the same tokens to the same
experts).

With --route-sets FILE it runs the routings `bench_nvfp4_mega_moe` timed (MEGAMOE_BENCH_ROUTES):
one JSON line per bench row, {"preset", "routing", "tokens", "top_k", "sets": [routing objects as
above]}. Each row of --preset is timed like the bench times it: one CUDA graph that runs every set
once, the median replay divided by the number of sets. Output lines name the bench's routing
(uniform / zipf1.2 / masked20) and carry "routes": "bench".

With MEGAMOE_BENCH_SOAK_MS=N in the environment each --route-sets row's graph is also replayed for
N ms after timing, and a line "SOAKC torch_<preset>_<routing>_<T> t0 t1 layer_calls" (unix
seconds) follows its JSON line, for bench/probes/power_soak.py: the baseline's steady-state time,
SM clock and power beside the bench's (bench/NOTES.md, twentieth session).
"""
import argparse
import json
import os
import sys
import time

PRESETS = {  # hidden, intermediate, experts, top-k  (same table as src/core/presets.cpp)
    "h6144-e256-k8": (6144, 3072, 256, 8),
    "dsv4-flash": (4096, 2048, 256, 6),
    "dsv3": (7168, 2048, 256, 8),
    "qwen3-235b": (4096, 1536, 128, 8),
}


def route(torch, tokens, experts, topk, routing, gen):
    if routing == "skewed":
        ranks = torch.arange(1, experts + 1, dtype=torch.float64)
        p = (1.0 / ranks.pow(1.2)).expand(tokens, experts)
        idx = torch.multinomial(p, topk, replacement=False, generator=gen)
    else:
        idx = torch.rand(tokens, experts, generator=gen).argsort(dim=1)[:, :topk]
    w = torch.softmax(torch.randn(tokens, topk, generator=gen), dim=1)
    if routing == "masked":
        idx = torch.where(torch.rand(tokens, topk, generator=gen) < 0.2, -1, idx)
    return idx.to(torch.int64), w.float()


def moe_grouped(torch, x, idx, w, w13, w2):
    experts = w13.shape[0]
    flat = idx.reshape(-1)
    valid = flat >= 0
    key = torch.where(valid, flat, experts)  # masked routes sort last and are dropped
    order = torch.argsort(key, stable=True)
    nvalid = valid.sum()
    # index_add_ instead of bincount: bincount synchronizes, which breaks graph capture.
    counts = torch.zeros(experts + 1, dtype=torch.int64, device=x.device)
    counts.index_add_(0, key, torch.ones_like(key))
    offs = torch.cumsum(counts[:experts], 0).to(torch.int32)
    tok = order // idx.shape[1]
    xs = x[tok]
    h = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)
    inter = h.shape[1] // 2
    a = torch.nn.functional.silu(h[:, :inter].float()) * h[:, inter:].float()
    a = (a * w.reshape(-1)[order].unsqueeze(1)).to(torch.bfloat16)
    y = torch._grouped_mm(a, w2.transpose(1, 2), offs=offs)
    keep = (torch.arange(order.numel(), device=x.device) < nvalid).unsqueeze(1)
    y = torch.where(keep, y, torch.zeros((), dtype=y.dtype, device=y.device))
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    out.index_add_(0, tok, y.float())
    return out.to(torch.bfloat16)


def check_routing(obj, topk, where):
    """None when obj is a routing object of top-`topk` routes, else what is wrong with it."""
    try:
        tokens, k = int(obj["tokens"]), int(obj["top_k"])
        idx, w = obj["topk_idx"], obj["topk_weights"]
    except (KeyError, TypeError, ValueError) as e:
        return "%s: not a routing object (%s)" % (where, e)
    if k != topk:
        return "%s: top_k %d, the preset's is %d" % (where, k, topk)
    if tokens < 1 or len(idx) != tokens * k or len(w) != tokens * k:
        return "%s: %d ids and %d weights for %d tokens of top-%d" % (where, len(idx), len(w),
                                                                      tokens, k)
    return None


def load_route_sets(path, preset):
    """The bench rows of `preset` in a MEGAMOE_BENCH_ROUTES file: [(routing, tokens, sets)], or
    raises ValueError naming the line and the rule."""
    topk = PRESETS[preset][3]
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError("%s line %d: not JSON (%s)" % (path, n, e))
            if rec.get("preset") != preset:
                continue
            sets = rec.get("sets")
            if not isinstance(sets, list) or not sets:
                raise ValueError("%s line %d: \"sets\" must be a non-empty list" % (path, n))
            for i, obj in enumerate(sets):
                err = check_routing(obj, topk, "%s line %d set %d" % (path, n, i))
                if err is None and int(obj["tokens"]) != int(rec.get("tokens", -1)):
                    err = "%s line %d set %d: %s tokens, the row's are %s" % (
                        path, n, i, obj["tokens"], rec.get("tokens"))
                if err is not None:
                    raise ValueError(err)
            rows.append((str(rec.get("routing")), int(rec["tokens"]), sets))
    if not rows:
        raise ValueError("%s holds no row of preset %s" % (path, preset))
    return rows


def time_graph(torch, fn, reps=50):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(5):
        graph.replay()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    times.sort()
    return times[len(times) // 2]


def soak_graph(torch, fn, ms):
    """Replays fn's graph for `ms` milliseconds; returns (t0, t1, replays) in unix seconds."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    # Batches of 8 replays, the next queued before the host waits for the previous one (the GPU
    # never idles between them).
    done = [torch.cuda.Event(), torch.cuda.Event()]
    n, batch = 0, 0
    t0 = time.time()
    while True:
        for _ in range(8):
            graph.replay()
        n += 8
        done[batch & 1].record()
        if batch > 0:
            done[(batch - 1) & 1].synchronize()
        batch += 1
        if (time.time() - t0) * 1e3 >= ms:
            break
    torch.cuda.synchronize()
    return t0, time.time(), n


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preset", default="dsv4-flash", choices=sorted(PRESETS))
    ap.add_argument("--tokens", default="1,16,64,128,512")
    ap.add_argument("--routing", default="uniform", choices=["uniform", "skewed", "masked"])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--routes", default=None,
                    help="JSON file with the routing to run (one token count; see above)")
    ap.add_argument("--device", type=int, default=None,
                    help="CUDA device index (default: torch's current device)")
    ap.add_argument("--route-sets", default=None,
                    help="MEGAMOE_BENCH_ROUTES file of bench_nvfp4_mega_moe (see above)")
    args = ap.parse_args()
    if args.routes is not None and args.route_sets is not None:
        print(json.dumps({"error": "--routes and --route-sets name different routings; give one"}))
        return 1
    try:
        soak_ms = float(os.environ.get("MEGAMOE_BENCH_SOAK_MS") or 0)
    except ValueError:
        soak_ms = -1.0
    if not 0 <= soak_ms <= 60000:
        print(json.dumps({"error": "MEGAMOE_BENCH_SOAK_MS must be a number of milliseconds in "
                                   "[0, 60000], got %r" % os.environ.get("MEGAMOE_BENCH_SOAK_MS")}))
        return 1
    bench_rows = None
    if args.route_sets is not None:
        try:
            bench_rows = load_route_sets(args.route_sets, args.preset)
        except (OSError, ValueError) as e:
            print(json.dumps({"error": "--route-sets: %s" % e}))
            return 1
    given = None
    if args.routes is not None:
        with open(args.routes) as f:
            given = json.load(f)
        if args.tokens != str(given["tokens"]) or given["top_k"] != PRESETS[args.preset][3]:
            print(json.dumps({"error": "--routes holds %s tokens of top-%s; asked for --tokens %s "
                                       "of %s (top-%d)" % (given["tokens"], given["top_k"],
                                                           args.tokens, args.preset,
                                                           PRESETS[args.preset][3])}))
            return 1
    try:
        import torch
    except ImportError:
        print(json.dumps({"error": "torch is not installed"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA GPU visible to torch"}))
        return 0
    hidden, inter, experts, topk = PRESETS[args.preset]
    gen = torch.Generator().manual_seed(args.seed if args.seed is not None else torch.seed())
    if args.device is not None and not 0 <= args.device < torch.cuda.device_count():
        print(json.dumps({"error": "--device %d: torch sees %d CUDA devices"
                                   % (args.device, torch.cuda.device_count())}))
        return 1
    dev = torch.device("cuda", args.device if args.device is not None
                       else torch.cuda.current_device())
    torch.cuda.set_device(dev)  # the graph pool, events and streams of time_graph follow it
    w13 = (torch.randn(experts, 2 * inter, hidden, device=dev, dtype=torch.bfloat16) * 0.02)
    w2 = (torch.randn(experts, hidden, inter, device=dev, dtype=torch.bfloat16) * 0.02)
    impl = "torch._grouped_mm bf16"
    for routing, tokens, sets in bench_rows or []:
        calls = []
        for obj in sets:
            x = torch.randn(tokens, hidden, generator=gen).to(dev, torch.bfloat16)
            idx = torch.tensor(obj["topk_idx"], dtype=torch.int64).reshape(tokens, topk).to(dev)
            w = torch.tensor(obj["topk_weights"], dtype=torch.float32).reshape(tokens, topk).to(dev)
            calls.append((x, idx, w))
        try:
            us = time_graph(torch, lambda: [moe_grouped(torch, x, i, w, w13, w2)
                                            for x, i, w in calls]) / len(calls)
        except Exception as e:  # report, never hide, a baseline that cannot run
            print(json.dumps({"preset": args.preset, "tokens": tokens, "routing": routing,
                              "error": str(e)[:300]}))
            continue
        print(json.dumps({"preset": args.preset, "tokens": tokens, "routing": routing,
                          "baseline_us": round(us, 2), "impl": impl, "routes": "bench",
                          "sets": len(calls)}))
        if soak_ms > 0:
            t0, t1, n = soak_graph(torch, lambda: [moe_grouped(torch, x, i, w, w13, w2)
                                                   for x, i, w in calls], soak_ms)
            print("SOAKC torch_%s_%s_%d %.6f %.6f %d" % (args.preset, routing, tokens, t0, t1,
                                                         n * len(calls)))
        sys.stdout.flush()
    if bench_rows is not None:
        return 0
    for tokens in (int(t) for t in args.tokens.split(",")):
        x = torch.randn(tokens, hidden, generator=gen).to(dev, torch.bfloat16)
        if given is not None:
            idx = torch.tensor(given["topk_idx"], dtype=torch.int64).reshape(tokens, topk)
            w = torch.tensor(given["topk_weights"], dtype=torch.float32).reshape(tokens, topk)
        else:
            idx, w = route(torch, tokens, experts, topk, args.routing, gen)
        idx, w = idx.to(dev), w.to(dev)
        try:
            us = time_graph(torch, lambda: moe_grouped(torch, x, idx, w, w13, w2))
        except Exception as e:  # report, never hide, a baseline that cannot run
            print(json.dumps({"preset": args.preset, "tokens": tokens, "routing": args.routing,
                              "error": str(e)[:300]}))
            continue
        print(json.dumps({"preset": args.preset, "tokens": tokens,
                          "routing": "given" if given is not None else args.routing,
                          "baseline_us": round(us, 2), "impl": impl}))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
