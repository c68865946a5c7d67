"""Format helpers through Python: hand-worked vectors, round trips, DLPack input handling."""

import numpy as np
import pytest

import megamoe

f = pytest.importorskip("megamoe.formats")

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def rng():
    seed = np.random.SeedSequence().entropy
    print(f"seed {seed}")
    return np.random.default_rng(seed)


def test_e2m1_codes_and_ties_to_even():
    for code, value in enumerate(E2M1):
        assert f.e2m1_from_float(value) == code
        assert f.e2m1_to_float(code) == value
        if value:
            assert f.e2m1_from_float(-value) == code | 8
            assert f.e2m1_to_float(code | 8) == -value
    # midpoints go to the even code
    assert f.e2m1_from_float(0.25) == 0
    assert f.e2m1_from_float(0.75) == 2
    assert f.e2m1_from_float(2.5) == 4
    assert f.e2m1_from_float(5.0) == 6
    # saturation
    assert f.e2m1_from_float(7.0) == 7
    assert f.e2m1_from_float(-100.0) == 15


def test_bf16_e4m3_ue8m0_scalars():
    assert f.bf16_from_float(1.0) == 0x3F80
    assert f.bf16_from_float(1.0 + 2**-8) == 0x3F80  # tie -> even
    assert f.bf16_from_float(1.0 + 3 * 2**-8) == 0x3F82  # tie -> even (up)
    assert f.bf16_to_float(0xC000) == -2.0
    assert f.e4m3_from_float(1.0) == 0x38
    assert f.e4m3_from_float(448.0) == 0x7E
    assert f.e4m3_from_float(1000.0) == 0x7E  # saturating
    assert f.e4m3_to_float(0x01) == 2.0**-9
    assert f.ue8m0_from_float_ceil(1.0) == 127
    assert f.ue8m0_from_float_ceil(1.5) == 128
    assert f.ue8m0_to_float(130) == 8.0


def test_nvfp4_hand_worked_block():
    # block amax 6 with global scale 1: block scale e4m3(6 / 6) = 1.0 (0x38), codes are exact
    row = np.array(E2M1 + [-v for v in E2M1[1:]] + [6.0], dtype=np.float32)
    packed, scales = f.quantize_nvfp4(row[None, :], 1.0)
    assert packed.dtype == np.uint8 and packed.shape == (1, 8)
    assert scales.tolist() == [[0x38]]
    # low nibble = even element
    assert packed[0].tolist() == [0x10, 0x32, 0x54, 0x76, 0xA9, 0xCB, 0xED, 0x7F]
    back = f.dequantize_nvfp4(packed, scales, np.ones(1, np.float32))
    np.testing.assert_array_equal(back[0], row)


def test_nvfp4_round_trip_error_is_within_half_a_step():
    x = rng().standard_normal((8, 64)).astype(np.float32)
    packed, scales, global_scales = f.quantize_nvfp4_per_row(x)
    assert global_scales.shape == (8,)
    back = f.dequantize_nvfp4(packed, scales, global_scales)
    assert back.shape == x.shape
    block_scale = np.array([[f.ue4m3_to_float(int(s)) for s in r] for r in scales])
    step = np.repeat(block_scale, 16, axis=1) * global_scales[:, None]
    # the widest e2m1 gap is 2 (between 4 and 6): error <= 1 step; the recipe never saturates
    assert np.all(np.abs(back - x) <= step * 1.0 + 1e-7)
    assert np.abs(back - x).max() > 0  # random data is not exactly representable


def test_mxfp4_hand_worked_and_round_trip():
    row = np.array(E2M1 * 4, dtype=np.float32)  # amax 6 -> scale 2^0 = 127
    packed, scales = f.quantize_mxfp4(row[None, :])
    assert scales.tolist() == [[127]]
    np.testing.assert_array_equal(f.dequantize_mxfp4(packed, scales)[0], row)
    x = rng().standard_normal((4, 64)).astype(np.float32)
    packed, scales = f.quantize_mxfp4(x)
    assert packed.shape == (4, 32) and scales.shape == (4, 2)
    back = f.dequantize_mxfp4(packed, scales)
    step = np.repeat(np.exp2(scales.astype(np.float64) - 127), 32, axis=1)
    assert np.all(np.abs(back - x) <= step + 1e-7)


def test_fp8_blocks():
    x = np.zeros((2, 128), np.float32)
    x[0, 0], x[0, 1], x[1, 5] = 448.0, 1.0, -224.0
    q, s = f.quantize_fp8_1x128(x)
    assert s.dtype == np.float32 and s.tolist() == [[1.0], [0.5]]
    assert q[0, 0] == 0x7E and q[0, 1] == 0x38 and q[1, 5] == 0xFE
    np.testing.assert_array_equal(f.dequantize_fp8(q, s, 1), x)
    q2, s2 = f.quantize_fp8_1x128(x, "ue8m0")
    assert s2.dtype == np.uint8 and s2.tolist() == [[127], [126]]  # 2^0 >= 448/448, 2^-1 >= 224/448
    w = rng().standard_normal((130, 256)).astype(np.float32)
    qw, sw = f.quantize_fp8_128x128(w, megamoe.Fp8ScaleKind.f32)
    assert sw.shape == (2, 2)
    back = f.dequantize_fp8(qw, sw, 128)
    assert np.abs(back - w).max() <= np.abs(w).max() / 448 * 32  # e4m3 has 3 mantissa bits


def test_swizzle_128x4_layout_and_round_trip():
    rows, cols = 130, 6
    sf = rng().integers(1, 256, size=(rows, cols), dtype=np.uint8)
    sw = f.swizzle_128x4(sf)
    assert sw.shape == (f.swizzled_128x4_size(rows, cols),)
    assert sw.shape[0] == 256 * 8  # rows padded to 128, cols to 4
    # the cuBLAS block-scaling layout: 128x4 tiles of 512 bytes, row r at (r%32)*16+(r%128)//32*4
    assert f.swizzled_128x4_offset(0, 0, cols) == 0
    assert f.swizzled_128x4_offset(0, 1, cols) == 1
    assert f.swizzled_128x4_offset(1, 0, cols) == 16
    assert f.swizzled_128x4_offset(32, 0, cols) == 4
    assert f.swizzled_128x4_offset(0, 4, cols) == 512
    assert f.swizzled_128x4_offset(128, 0, cols) == 1024
    for r in range(rows):
        for c in range(cols):
            assert sw[f.swizzled_128x4_offset(r, c, cols)] == sf[r, c]
    assert int(sw.astype(np.int64).sum()) == int(sf.astype(np.int64).sum())  # padding is zero
    np.testing.assert_array_equal(f.unswizzle_128x4(sw, rows, cols), sf)


def test_inputs_cross_as_any_dtype_and_layout():
    x = rng().standard_normal((4, 64)).astype(np.float32)
    ref = f.quantize_mxfp4(x)
    # strided (non-contiguous) view, read-only array, float64: same bytes
    wide = np.zeros((4, 128), np.float32)
    wide[:, ::2] = x
    ro = x.copy()
    ro.setflags(write=False)
    for variant in (wide[:, ::2], ro, x.astype(np.float64), np.asfortranarray(x)):
        got = f.quantize_mxfp4(variant)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])


def test_bad_inputs_raise_invalid_argument_naming_the_argument():
    with pytest.raises(megamoe.InvalidArgument) as info:
        f.quantize_nvfp4(np.ones((2, 30), np.float32), 1.0)
    assert info.value.argument == "x" and "multiple of 16" in str(info.value)
    with pytest.raises(megamoe.InvalidArgument, match="shape"):
        f.quantize_nvfp4(np.ones((2, 2, 16), np.float32), 1.0)
    with pytest.raises(megamoe.InvalidArgument, match="floating-point"):
        f.quantize_nvfp4(np.ones((2, 16), np.int32), 1.0)
    packed, scales = f.quantize_nvfp4(np.ones((2, 32), np.float32), 1.0)
    with pytest.raises(megamoe.InvalidArgument) as info:
        f.dequantize_nvfp4(packed, scales[:1], np.ones(1, np.float32))
    assert info.value.argument == "scales"
    with pytest.raises(megamoe.InvalidArgument) as info:
        f.dequantize_nvfp4(packed, scales, np.ones(3, np.float32))
    assert info.value.argument == "global_scales"
    with pytest.raises(megamoe.InvalidArgument) as info:
        f.dequantize_fp8(np.zeros((1, 128), np.uint8), np.ones((1, 1), np.float32), 7)
    assert info.value.argument == "block_rows"
    with pytest.raises(megamoe.InvalidArgument) as info:
        f.quantize_fp8_1x128(np.ones((1, 128), np.float32), "f16")
    assert info.value.argument == "scale_kind"
