"""GPU tests through megamoe.torch: every bound GPU function against the CPU oracle, CUDA-graph
capture and replay of an NVFP4 MegaMoE call, torch.compile. Skipped without torch or CUDA."""

import numpy as np
import pytest

import megamoe

torch = pytest.importorskip("torch", reason="GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("GPU tests need a CUDA device", allow_module_level=True)

import megamoe.formats as f  # noqa: E402
import megamoe.reference as ref  # noqa: E402
import megamoe.torch as mt  # noqa: E402

DEV = torch.device("cuda")


def seed():
    s = int(np.random.SeedSequence().entropy % 2**63)
    print(f"seed {s}")
    return s


def nvfp4_config(num_ranks=2, max_tokens=64, **kw):
    fields = dict(hidden=1024, intermediate=512, num_experts=16, top_k=4, num_ranks=num_ranks,
                  max_tokens_per_rank=max_tokens, weight_format="nvfp4", act_format="nvfp4")
    fields.update(kw)
    return megamoe.MoEConfig(**fields)


def bf16(a):
    return torch.from_numpy(np.ascontiguousarray(a)).to(DEV).to(torch.bfloat16)


def cuda(a):
    return torch.from_numpy(np.ascontiguousarray(a)).to(DEV)


class Layer:
    """Oracle weights, their per-rank kernel layout, and the oracle's answer for inputs."""

    def __init__(self, config, s):
        self.config = config
        self.weights = ref.random_weights(config, s)
        calib = ref.random_inputs(config, config.max_tokens_per_rank, seed=s + 1)
        self.fc2_scale = ref.calibrate_fc2_input_scales(
            config, calib["x"], calib["topk_idx"], calib["topk_weights"], self.weights)
        el = config.experts_per_rank
        self.kernel = []
        for r in range(config.num_ranks):
            sl = slice(r * el, (r + 1) * el)
            w13, w2 = self.weights.w13, self.weights.w2
            checkpoint = {
                "w13": cuda(w13.packed[sl]), "w13_sf": cuda(w13.scales[sl]),
                "w13_global": cuda(w13.global_scales[sl]),
                "w2": cuda(w2.packed[sl]), "w2_sf": cuda(w2.scales[sl]),
                "w2_global": cuda(w2.global_scales[sl]),
                "fc2_input_scale": cuda(self.fc2_scale[sl]),
            }
            self.kernel.append(mt.transform_weights_for_mega_moe(config, checkpoint))

    def oracle(self, x, idx, w):
        return ref.moe_forward(self.config, x, idx, w, self.weights,
                               fc2_input_scale=self.fc2_scale)["out"]


def inputs(config, tokens, s, masked=0.1):
    inp = ref.random_inputs(config, tokens, seed=s, masked_fraction=masked)
    return inp["x"], inp["topk_idx"], inp["topk_weights"]


def assert_close_to_oracle(got, want):
    got = got.double().cpu().numpy().ravel()
    want = want.ravel()
    cosine = got @ want / max(np.linalg.norm(got) * np.linalg.norm(want), 1e-30)
    rel_l2 = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    assert cosine >= 0.999 and rel_l2 <= 0.03, (cosine, rel_l2)


def test_buffer_views_are_named_typed_and_alias_the_memory():
    c = nvfp4_config()
    buf = mt.get_symm_buffer_for_mega_moe(c)
    names = [r.name for r in buf.plan.regions]
    views = buf.views(1)
    assert list(views) == names
    t, k = c.max_tokens_per_rank, c.top_k
    assert buf.topk_idx.dtype == torch.int32 and tuple(buf.topk_idx.shape) == (t, k)
    assert buf.topk_weights.dtype == torch.float32
    for name, v in views.items():
        assert v.device.type == "cuda"
        assert v.data_ptr() == buf.core.view_ptr(1, name)
        assert v.data_ptr() == buf.core.base(1) + buf.plan.region(name).offset
    assert buf.memory[1].numel() == buf.core.bytes_per_rank
    with pytest.raises(megamoe.InvalidArgument):
        buf.core.view(5, "x")
    with pytest.raises(AttributeError):
        buf.not_a_region  # noqa: B018


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_pre_dispatch_bytes_equal_the_format_oracle(idx_dtype):
    c = nvfp4_config()
    s = seed()
    buf = mt.get_symm_buffer_for_mega_moe(c)
    tokens = 37
    x, idx, w = inputs(c, tokens, s)
    h, t_max = c.hidden, c.max_tokens_per_rank
    for r in range(c.num_ranks):
        rows = slice(r * tokens, (r + 1) * tokens)
        mt.mega_moe_pre_dispatch(buf, bf16(x[rows]), cuda(idx[rows]).to(idx_dtype),
                                 cuda(w[rows]), rank=r)
    torch.cuda.synchronize()
    for r in range(c.num_ranks):
        rows = slice(r * tokens, (r + 1) * tokens)
        packed, scales, global_scales = f.quantize_nvfp4_per_row(x[rows])
        # numpy has no bf16: bf16 regions (combine slots) come back as their int16 bits.
        v = {k: (t.cpu().view(torch.int16) if t.dtype == torch.bfloat16 else t.cpu()).numpy()
             for k, t in buf.views(r).items()}
        np.testing.assert_array_equal(v["x"][:tokens, : h // 2], packed)
        np.testing.assert_array_equal(v["x_sf"][:tokens, : h // 16], scales)
        np.testing.assert_array_equal(v["x_global"][:tokens], global_scales)
        np.testing.assert_array_equal(v["topk_idx"][:tokens], idx[rows])
        assert (v["topk_idx"][tokens:t_max] == -1).all()
        want_w = np.where(idx[rows] < 0, 0.0, w[rows]).astype(np.float32)
        np.testing.assert_array_equal(v["topk_weights"][:tokens], want_w)
        assert (v["topk_weights"][tokens:t_max] == 0).all()
        assert v["num_tokens"][0] == tokens
        assert mt.read_and_clear_dispatch_errors(buf, r) == 0


def test_out_of_range_ids_are_counted_and_cleared():
    c = nvfp4_config()
    s = seed()
    buf = mt.get_symm_buffer_for_mega_moe(c)
    x, idx, w = inputs(c, 8, s, masked=0.0)
    idx = idx[:8].copy()
    idx[0, 0], idx[5, 2], idx[7, 1] = c.num_experts, c.num_experts + 100, -9
    mt.mega_moe_pre_dispatch(buf, bf16(x[:8]), cuda(idx), cuda(w[:8]), rank=0)
    assert mt.read_and_clear_dispatch_errors(buf, 0) == 3
    assert mt.read_and_clear_dispatch_errors(buf, 0) == 0
    got = buf.view("topk_idx", 0).cpu().numpy()
    assert got[0, 0] == -1 and got[5, 2] == -1 and got[7, 1] == -1


def test_bad_device_input_raises_invalid_argument_and_launches_nothing():
    c = nvfp4_config()
    buf = mt.get_symm_buffer_for_mega_moe(c)
    s = seed()
    x, idx, w = inputs(c, 4, s)
    x, idx, w = x[:4], idx[:4], w[:4]
    cases = [
        (cuda(x), cuda(idx), cuda(w)),  # float32 tokens
        (bf16(x).cpu(), cuda(idx), cuda(w)),  # host tokens
        (bf16(x), cuda(idx).float(), cuda(w)),  # float ids
        (bf16(x)[:, :512], cuda(idx), cuda(w)),  # wrong H
    ]
    for xs, ids, ws in cases:
        with pytest.raises(megamoe.InvalidArgument) as info:
            mt.mega_moe_pre_dispatch(buf, xs, ids, ws, rank=0)
        assert info.value.argument is not None
    too_many = np.zeros((c.max_tokens_per_rank + 1, c.hidden), np.float32)
    with pytest.raises(megamoe.InvalidArgument):
        mt.mega_moe_pre_dispatch(buf, bf16(too_many), cuda(np.zeros((len(too_many), 4), np.int32)),
                                 cuda(np.zeros((len(too_many), 4), np.float32)), rank=0)


def test_scale_layout_transform_reads_swizzled_checkpoints():
    s = seed()
    rng = np.random.default_rng(s)
    rows, cols = 200, 12
    sf = rng.integers(0x20, 0x60, size=(2, rows, cols), dtype=np.uint8)
    swizzled = np.concatenate([f.swizzle_128x4(sf[e]) for e in range(2)])
    from_row_major = mt.transform_ue4m3_sf_into_required_layout(cuda(sf), "row_major")
    out = torch.empty((2, rows, cols), dtype=torch.uint8, device=DEV)
    from_swizzled = mt.transform_ue4m3_sf_into_required_layout(
        cuda(swizzled), megamoe.ScaleLayout.swizzled_128x4, out)
    torch.testing.assert_close(from_swizzled, from_row_major, rtol=0, atol=0)
    np.testing.assert_array_equal(from_row_major.cpu().numpy(), sf)


@pytest.mark.parametrize("tokens", [1, 7, 64])
def test_nvfp4_mega_moe_matches_the_oracle(tokens):
    c = nvfp4_config()
    s = seed()
    layer = Layer(c, s)
    buf = mt.get_symm_buffer_for_mega_moe(c)
    x, idx, w = inputs(c, tokens, s + 2)
    for r in range(c.num_ranks):
        rows = slice(r * tokens, (r + 1) * tokens)
        mt.mega_moe_pre_dispatch(buf, bf16(x[rows]), cuda(idx[rows]), cuda(w[rows]), rank=r)
    outs = mt.nvfp4_mega_moe(buf, layer.kernel, num_tokens=tokens)
    assert len(outs) == c.num_ranks and outs[0].shape == (tokens, c.hidden)
    assert outs[0].dtype == torch.bfloat16
    torch.cuda.synchronize()
    assert_close_to_oracle(torch.cat(outs), layer.oracle(x, idx, w))
    # repeatable bit for bit
    again = mt.nvfp4_mega_moe(buf, layer.kernel, num_tokens=tokens)
    for a, b in zip(outs, again):
        assert torch.equal(a, b)


def test_ragged_token_counts_and_idle_ranks_match_the_oracle():
    # Data-parallel ranks with their own batch sizes; idle ranks pass empty tensors and still
    # join the call. Outputs have each rank's own row count.
    c = nvfp4_config(num_ranks=4)
    s = seed()
    layer = Layer(c, s)
    buf = mt.get_symm_buffer_for_mega_moe(c)
    counts = [0, 13, 1, 40]
    x, idx, w = inputs(c, max(counts), s + 2)
    per = max(counts)
    keep = np.concatenate([np.arange(r * per, r * per + t) for r, t in enumerate(counts)])
    x, idx, w = x[keep], idx[keep], w[keep]
    first = np.concatenate([[0], np.cumsum(counts)])
    for r, t in enumerate(counts):
        rows = slice(first[r], first[r] + t)
        mt.mega_moe_pre_dispatch(buf, bf16(x[rows]), cuda(idx[rows]), cuda(w[rows]), rank=r)
    outs = mt.nvfp4_mega_moe(buf, layer.kernel, num_tokens=counts)
    assert [o.shape[0] for o in outs] == counts
    torch.cuda.synchronize()
    want = ref.moe_forward(c, x, idx, w, layer.weights, fc2_input_scale=layer.fc2_scale,
                           rank_tokens=np.array(counts, dtype=np.int64))["out"]
    assert_close_to_oracle(torch.cat(outs), want)
    # The largest count given: the same BLOCK_M (all ranks in this process); below it: refused.
    again = mt.nvfp4_mega_moe(buf, layer.kernel, num_tokens=counts, max_tokens_across_ranks=40)
    assert all(torch.equal(a, b) for a, b in zip(outs, again))
    with pytest.raises(megamoe.InvalidArgument, match="max_tokens_across_ranks"):
        mt.nvfp4_mega_moe(buf, layer.kernel, num_tokens=counts, max_tokens_across_ranks=39)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_layer_on_the_second_gpu_equals_the_first():
    # torch tags tensors cuda:1 under torch.cuda.device(1); the launchers check against the
    # current context's GPU, so the same call works there and gives the same bits.
    c = nvfp4_config()
    s = seed()
    tokens = 24
    x, idx, w = inputs(c, tokens, s + 2)
    outs = {}
    for d in (0, 1):
        with torch.cuda.device(d):
            layer = Layer(c, s)
            buf = mt.get_symm_buffer_for_mega_moe(c)
            for r in range(c.num_ranks):
                rows = slice(r * tokens, (r + 1) * tokens)
                mt.mega_moe_pre_dispatch(buf, bf16(x[rows]), cuda(idx[rows]), cuda(w[rows]),
                                         rank=r)
            got = mt.nvfp4_mega_moe(buf, layer.kernel, num_tokens=tokens)
            assert got[0].device == torch.device("cuda", d)
            torch.cuda.synchronize()
            outs[d] = torch.cat(got).cpu()
    assert_close_to_oracle(outs[1], layer.oracle(x, idx, w))
    assert torch.equal(outs[0], outs[1])


def test_cuda_graph_captures_and_replays_nvfp4_mega_moe():
    c = nvfp4_config()
    s = seed()
    layer = Layer(c, s)
    buf = mt.get_symm_buffer_for_mega_moe(c)
    tokens, r_count = 16, c.num_ranks
    static_x = [torch.zeros(tokens, c.hidden, dtype=torch.bfloat16, device=DEV)
                for _ in range(r_count)]
    static_idx = [torch.zeros(tokens, c.top_k, dtype=torch.int32, device=DEV)
                  for _ in range(r_count)]
    static_w = [torch.zeros(tokens, c.top_k, dtype=torch.float32, device=DEV)
                for _ in range(r_count)]
    outs = [torch.empty(tokens, c.hidden, dtype=torch.bfloat16, device=DEV)
            for _ in range(r_count)]

    def load(seed_value):
        x, idx, w = inputs(c, tokens, seed_value)
        for r in range(r_count):
            rows = slice(r * tokens, (r + 1) * tokens)
            static_x[r].copy_(bf16(x[rows]))
            static_idx[r].copy_(cuda(idx[rows]).to(torch.int32))
            static_w[r].copy_(cuda(w[rows]))
        return x, idx, w

    def step():
        for r in range(r_count):
            mt.mega_moe_pre_dispatch(buf, static_x[r], static_idx[r], static_w[r], rank=r)
        mt.nvfp4_mega_moe(buf, layer.kernel, out=outs)

    load(s + 10)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # JIT-compiles and loads outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for k in range(3):
        x, idx, w = load(s + 20 + k)
        graph.replay()
        torch.cuda.synchronize()
        assert_close_to_oracle(torch.cat(outs), layer.oracle(x, idx, w))


def one_rank_case(tokens, offset, layers=1):
    """A one-rank layer of 8 experts (`layers` weight sets of it), its buffer, and fresh inputs:
    (config, layers, buffer, numpy (x, idx, w), the same on the GPU)."""
    c = nvfp4_config(num_ranks=1, num_experts=8)
    s = seed()
    ls = [Layer(c, s + 100 * i) for i in range(layers)]
    buf = mt.get_symm_buffer_for_mega_moe(c)
    x, idx, w = inputs(c, tokens, s + offset)
    return c, ls, buf, (x, idx, w), (bf16(x), cuda(idx), cuda(w))


def nvfp4_via_ops(buf, weights, tokens):
    """nvfp4_mega_moe through torch.ops.megamoe.* (every tensor handed over afresh), into a
    NaN-poisoned output."""
    out = torch.full((tokens, buf.hidden), float("nan"), dtype=torch.bfloat16, device=DEV)
    torch.ops.megamoe.nvfp4_mega_moe(buf.id, buf.memory,
                                     *[[weights[n]] for n in mt._KERNEL_FIELDS], [out], [0], 0)
    return out


def test_torch_compile_traces_the_custom_ops():
    _, (layer,), buf, (x, idx, w), (xt, it, wt) = one_rank_case(9, 3)

    def moe(x_, i_, w_):
        mt.mega_moe_pre_dispatch(buf, x_, i_, w_, rank=0)
        return mt.nvfp4_mega_moe(buf, layer.kernel[0], num_tokens=x_.shape[0])

    eager = moe(xt, it, wt)
    compiled = torch.compile(moe, fullgraph=True)(xt, it, wt)
    assert torch.equal(eager, compiled)
    assert_close_to_oracle(eager, layer.oracle(x, idx, w))


def test_eager_calls_skip_the_dispatcher_and_bump_what_they_write():
    # Eager calls run the ops' function without the dispatcher (megamoe.torch._direct): the same
    # bits as torch.ops.megamoe.*, and the tensors they write move their version counters as the
    # ops' would, so autograd refuses a backward that saved the output before a later call.
    c, (layer,), buf, (x, idx, w), (xt, it, wt) = one_rank_case(5, 4)
    memory_version = buf.memory[0]._version
    mt.mega_moe_pre_dispatch(buf, xt, it, wt)
    assert buf.memory[0]._version > memory_version
    out = torch.full((5, c.hidden), float("nan"), dtype=torch.bfloat16, device=DEV)
    out_version = out._version
    assert mt.nvfp4_mega_moe(buf, layer.kernel[0], out=out) is out
    assert out._version > out_version
    torch.ops.megamoe.pre_dispatch(buf.id, buf.memory, xt, it, wt, None, 0)
    via_ops = nvfp4_via_ops(buf, layer.kernel[0], 5)
    torch.cuda.synchronize()
    assert torch.equal(out, via_ops)
    assert_close_to_oracle(out, layer.oracle(x, idx, w))
    a = torch.ones_like(out, requires_grad=True)
    y = (a * out).sum()  # saves out for a's gradient
    mt.nvfp4_mega_moe(buf, layer.kernel[0], out=out)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_eager_weight_views_follow_the_dicts_tensors():
    # Eager calls take the extension's views of a weight dict's tensors once
    # (megamoe.torch._weight_views); an entry replaced by another tensor, or a tensor whose data
    # moved (set_), must be seen by the next call: each result equals torch.ops.megamoe.*'s on the
    # same dict, which hands every tensor over afresh.
    tokens = 6
    c, (a, b), buf, _, (xt, it, wt) = one_rank_case(tokens, 5, layers=2)
    mt.mega_moe_pre_dispatch(buf, xt, it, wt)
    weights = dict(a.kernel[0])
    weights["w13"] = weights["w13"].clone()  # ours to move below
    first = mt.nvfp4_mega_moe(buf, weights, num_tokens=tokens)
    assert torch.equal(first, nvfp4_via_ops(buf, weights, tokens))
    weights["w2"], weights["fc2_alpha"] = b.kernel[0]["w2"], b.kernel[0]["fc2_alpha"]
    mixed = mt.nvfp4_mega_moe(buf, weights, num_tokens=tokens)
    assert not torch.equal(mixed, first)
    assert torch.equal(mixed, nvfp4_via_ops(buf, weights, tokens))
    weights["w13"].set_(b.kernel[0]["w13"].clone())  # the same object, other storage
    moved = mt.nvfp4_mega_moe(buf, weights, num_tokens=tokens)
    assert not torch.equal(moved, mixed)
    assert torch.equal(moved, nvfp4_via_ops(buf, weights, tokens))
    torch.cuda.synchronize()
    assert torch.isfinite(moved.float()).all()


def test_sm_budget_and_block_m_from_python():
    n = megamoe.get_num_sms()
    assert n > 0
    try:
        megamoe.set_num_sms(8)
        assert megamoe.get_num_sms() == 8
    finally:
        megamoe.set_num_sms(0)
    assert megamoe.get_num_sms() == n
    c = nvfp4_config()
    assert mt.get_block_m_for_mega_moe(c, 1) in megamoe.reachable_block_ms(c)


def test_other_families_validate_their_arguments():
    c = nvfp4_config(weight_format="bf16", act_format="bf16")
    buf = mt.get_symm_buffer_for_mega_moe(c)
    el, h, i = c.experts_per_rank, c.hidden, c.intermediate
    bad = {"w13": torch.zeros(el, 2 * i, h, dtype=torch.float32, device=DEV),
           "w2": torch.zeros(el, h, i, dtype=torch.bfloat16, device=DEV)}
    with pytest.raises(megamoe.InvalidArgument) as info:
        mt.bf16_mega_moe(buf, [bad, bad], num_tokens=1)
    assert "w13" in str(info.value)
