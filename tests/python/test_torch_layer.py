"""megamoe.torch without a GPU: the custom ops register and their fake implementations trace."""

import pytest

import megamoe

torch = pytest.importorskip("torch", reason="the torch layer needs torch")

import megamoe.torch as mt  # noqa: E402


def test_ops_are_registered():
    assert hasattr(torch.ops.megamoe, "pre_dispatch")
    assert hasattr(torch.ops.megamoe, "nvfp4_mega_moe")
    assert mt.get_block_m_for_mega_moe is megamoe.get_block_m_for_mega_moe


def test_fake_implementations_trace_without_running():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(4, 256, dtype=torch.bfloat16)
        idx = torch.empty(4, 2, dtype=torch.int32)
        w = torch.empty(4, 2)
        memory = [torch.empty(16, dtype=torch.uint8)]
        assert torch.ops.megamoe.pre_dispatch(12345, memory, x, idx, w, None, 0) is None
        out = [torch.empty(4, 256, dtype=torch.bfloat16)]
        lists = [[torch.empty(8, dtype=torch.uint8)] for _ in range(4)]
        floats = [[torch.empty(2)] for _ in range(3)]
        assert torch.ops.megamoe.nvfp4_mega_moe(12345, memory, *lists, *floats, out, [0]) is None
        # max_tokens_across_ranks (ragged batches across processes)
        assert torch.ops.megamoe.nvfp4_mega_moe(12345, memory, *lists, *floats, out, [0],
                                                64) is None


def test_unknown_buffer_id_is_invalid_argument():
    x = torch.zeros(1, 256, dtype=torch.bfloat16)
    with pytest.raises(megamoe.InvalidArgument):
        torch.ops.megamoe.pre_dispatch(-1, [torch.zeros(1, dtype=torch.uint8)], x,
                                       torch.zeros(1, 2, dtype=torch.int32), torch.zeros(1, 2),
                                       None, 0)
