"""Buffer planner and heuristics through Python (host code, no GPU)."""

import numpy as np
import pytest

import megamoe


INPUT_REGIONS = ["x", "x_sf", "topk_idx", "topk_weights", "num_tokens", "error_count"]


def config(**kw):
    fields = dict(hidden=2048, intermediate=1024, num_experts=64, top_k=6, num_ranks=4,
                  max_tokens_per_rank=96)
    fields.update(kw)
    return megamoe.MoEConfig(**fields)


@pytest.mark.parametrize("fmt", ["nvfp4", "fp8"])
def test_plan_regions_are_aligned_ordered_and_disjoint(fmt):
    c = config(weight_format=fmt, act_format=fmt)
    plan = megamoe.plan_symm_buffer(c)
    end = 0
    for r in plan.regions:
        assert r.offset >= end, r
        assert r.alignment > 0 and r.offset % r.alignment == 0, r
        end = r.offset + r.bytes
    assert plan.total_bytes >= end
    for name in INPUT_REGIONS + ["combine", "sync"]:
        assert name in plan and plan.region(name).name == name
    t, k, h = c.max_tokens_per_rank, c.top_k, c.hidden
    assert plan.region("topk_idx").bytes >= t * k * 4
    assert plan.region("topk_weights").bytes >= t * k * 4
    assert plan.region("x").bytes >= t * (h // 2 if fmt == "nvfp4" else h)
    assert plan.has("x_global") == (fmt == "nvfp4")
    assert plan.config.hidden == h


def test_plan_grows_with_tokens_and_errors_name_the_argument():
    small = megamoe.plan_symm_buffer(config(max_tokens_per_rank=32)).total_bytes
    large = megamoe.plan_symm_buffer(config(max_tokens_per_rank=512)).total_bytes
    assert large > small
    with pytest.raises(megamoe.InvalidArgument) as info:
        megamoe.plan_symm_buffer(config()).region("nope")
    assert info.value.argument == "region"
    with pytest.raises(megamoe.InvalidArgument):
        megamoe.plan_symm_buffer(config(num_experts=63))  # E must divide over 4 ranks
    with pytest.raises(megamoe.InvalidArgument):
        megamoe.plan_symm_buffer(config(hidden=0))


def test_block_m_is_reachable_and_monotone():
    c = config(max_tokens_per_rank=4096)
    reachable = megamoe.reachable_block_ms(c)
    assert reachable == sorted(reachable) and len(reachable) >= 1
    previous = 0
    for t in [1, 2, 7, 16, 63, 64, 65, 256, 1000, 4096]:
        bm = megamoe.get_block_m_for_mega_moe(c, t)
        assert bm in reachable
        assert bm >= previous
        previous = bm


def test_device_tile_choice():
    # dsv4-flash widths: 8-token tiles from the table, 32 on the device from one route per expert.
    c = config(hidden=4096, intermediate=2048, num_experts=256, top_k=6, num_ranks=1,
               max_tokens_per_rank=128)
    assert megamoe.get_device_choice_block_m_for_mega_moe(c, 42) is None
    assert megamoe.get_device_choice_block_m_for_mega_moe(c, 43) == 32
    assert megamoe.reachable_block_ms(c) == [8, 32]
    assert 100 <= megamoe.tile_choice_percent() <= 1000


def test_tile_choice_for_route_counts(monkeypatch):
    monkeypatch.delenv("MEGAMOE_TILE_CHOICE", raising=False)
    # One hot expert: 4 passes of 8 against 1 of 32. Uniform single routes: 4 passes either way.
    assert megamoe.tile_choice_for_route_counts([32, 0, 0], 8, 32) == 32
    assert megamoe.tile_choice_for_route_counts([1, 1, 1, 1], 8, 32) == 8
    # 22 passes against 21 is below 105 %, and at or above 100 %.
    assert megamoe.tile_choice_for_route_counts([1] * 20 + [9], 8, 32) == 8
    monkeypatch.setenv("MEGAMOE_TILE_CHOICE", "100")
    assert megamoe.tile_choice_for_route_counts([1] * 20 + [9], 8, 32) == 32
    with pytest.raises(megamoe.InvalidArgument, match=r"route_counts\[1\]"):
        megamoe.tile_choice_for_route_counts([1, -1], 8, 32)
    with pytest.raises(megamoe.InvalidArgument, match="block_m, alternative"):
        megamoe.tile_choice_for_route_counts([1], 32, 16)
    # With a minimum gain of 2 passes, 22 against 21 no longer clears it.
    assert megamoe.tile_choice_for_route_counts([1] * 20 + [9], 8, 32, 2) == 8
    monkeypatch.delenv("MEGAMOE_TILE_CHOICE")
    c = config(hidden=4096, intermediate=2048, num_experts=256, top_k=6, num_ranks=2,
               max_tokens_per_rank=128)
    assert megamoe.tile_choice_min_gain_passes(c, 8) == 13
    assert megamoe.tile_choice_min_gain_passes(c, 16) == 0


def test_sm_budget_rule():
    assert megamoe.resolve_num_sms(132, 0, None) == 132
    assert megamoe.resolve_num_sms(132, 0, "3") == 128  # headroom rounded up to even
    assert megamoe.resolve_num_sms(132, 0, "4") == 128
    assert megamoe.resolve_num_sms(132, 100, "4") == 100  # explicit count wins
    with pytest.raises(megamoe.InvalidArgument, match="MEGAMOE_SM_HEADROOM"):
        megamoe.resolve_num_sms(132, 0, "abc")
    with pytest.raises(megamoe.InvalidArgument) as info:
        megamoe.set_num_sms(-1)
    assert info.value.argument == "num_sms"


def test_get_num_sms_without_gpu_is_a_cuda_error():
    try:
        n = megamoe.get_num_sms()
    except megamoe.CudaError as e:
        assert "GPU" in str(e) or "CUDA" in str(e)
    else:
        assert n > 0  # a machine with a GPU
    np.testing.assert_equal(megamoe.set_num_sms(0), None)
