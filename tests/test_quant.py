"""Cache formats: exact byte layouts of the MLA FP8 formats, the scale rule, round-trip
error bounds, and IFA per-channel int8 / fp8 quantization."""

import math

import pytest
import torch

from dualops import quant

E4M3_HALF_ULP = 2.0 ** -4   # relative rounding error of a normal e4m3 value (3 mantissa bits)
E4M3_SUBNORMAL_STEP = 2.0 ** -9


def _e4m3_bound(x, scale):
    """Worst-case |x - dequant(quant(x))| for e4m3 with the given (broadcast) scale."""
    return x.abs() * E4M3_HALF_ULP + scale * E4M3_SUBNORMAL_STEP / 2


def _pow2_up(amax):
    """The scale rule, written out: amax / 448 clamped >= 1e-4, rounded up to 2**k."""
    s = max(amax / 448.0, 1e-4)
    return 2.0 ** math.ceil(math.log2(s))


def test_constants():
    assert quant.MLA_FORMATS == {"bf16": 1152, "fp8_v32": 656, "fp8_model1": 584}
    assert quant.MLA_D_QK == {"bf16": 576, "fp8_v32": 576, "fp8_model1": 512}
    assert quant.mla_bytes_per_token("bf16", 512) == 1024
    assert quant.mla_bytes_per_token("fp8_model1") == 584
    with pytest.raises(ValueError, match="kv_format"):
        quant.mla_bytes_per_token("fp4")


@pytest.mark.parametrize("amax", [0.0, 1e-6, 448.0 * 2 ** -3, 448.0 * 2 ** -3 * 1.001, 3.7, 1000.0])
def test_pow2_scale_rule(amax):
    e = quant.pow2_scale_exponent(torch.tensor([amax]))
    assert 2.0 ** int(e) == _pow2_up(amax)


def test_v32_layout_bytes():
    torch.manual_seed(0)
    nb, pbs = 3, 4
    kv = torch.randn(nb, pbs, 1, 576)
    kv[..., :512] *= torch.tensor([0.01, 1.0, 30.0, 500.0]).repeat_interleave(128)
    kv[1, 2, 0, 128:256] = 0.0  # an all-zero tile: scale clamps to 1e-4 -> 2**-13
    packed = quant.pack_mla_kv(kv.to(torch.bfloat16), "fp8_v32")
    assert packed.dtype == torch.uint8 and packed.shape == (nb, pbs, 1, 656)
    x = kv.to(torch.bfloat16).float()
    for b in range(nb):
        for t in range(pbs):
            row = packed[b, t, 0]
            scales = row[512:528].clone().view(torch.float32)
            for tile in range(4):
                vals = x[b, t, 0, tile * 128:(tile + 1) * 128]
                s = _pow2_up(float(vals.abs().max()))
                assert float(scales[tile]) == s
                expect = (vals / s).to(torch.float8_e4m3fn).view(torch.uint8)
                assert torch.equal(row[tile * 128:(tile + 1) * 128], expect)
            rope = x[b, t, 0, 512:].to(torch.bfloat16).view(torch.uint8)
            assert torch.equal(row[528:656], rope)
    assert float(packed[1, 2, 0, 516:520].clone().view(torch.float32)) == 2.0 ** -13


def test_model1_layout_bytes():
    torch.manual_seed(1)
    nb, pbs = 2, 5
    kv = (torch.randn(nb, pbs, 1, 512) * 3).to(torch.bfloat16)
    packed = quant.pack_mla_kv(kv, "fp8_model1")
    assert packed.dtype == torch.uint8 and packed.shape == (nb, pbs, 1, 584)
    x = kv.float()
    for b in range(nb):
        stream = packed[b].reshape(-1)  # one block = one byte run of pbs * 584 bytes
        assert stream.numel() == pbs * 584
        for t in range(pbs):
            data = stream[t * 576:(t + 1) * 576]
            sbytes = stream[pbs * 576 + t * 8: pbs * 576 + (t + 1) * 8]
            assert int(sbytes[7]) == 0  # pad byte
            for tile in range(7):
                vals = x[b, t, 0, tile * 64:(tile + 1) * 64]
                s = _pow2_up(float(vals.abs().max()))
                assert int(sbytes[tile]) == round(math.log2(s)) + 127  # e8m0 exponent
                assert torch.equal(data[tile * 64:(tile + 1) * 64], (vals / s).to(torch.float8_e4m3fn).view(torch.uint8))
            assert torch.equal(data[448:576], x[b, t, 0, 448:].to(torch.bfloat16).view(torch.uint8))


@pytest.mark.parametrize("fmt,d,tile", [("fp8_v32", 576, 128), ("fp8_model1", 512, 64)])
def test_mla_round_trip_error_bound(fmt, d, tile):
    torch.manual_seed(2)
    kv = torch.randn(4, 16, 1, d) * torch.rand(4, 16, 1, 1) * 10
    d_nope = d - 64
    back = quant.unpack_mla_kv(quant.pack_mla_kv(kv, fmt), fmt, out_dtype=torch.float32)
    nope, nope_back = kv[..., :d_nope], back[..., :d_nope]
    amax = nope.unflatten(-1, (-1, tile)).abs().amax(-1)
    scale = torch.tensor([_pow2_up(float(a)) for a in amax.flatten()]).view(amax.shape)
    bound = _e4m3_bound(nope, scale.repeat_interleave(tile, dim=-1))
    assert ((nope - nope_back).abs() <= bound).all()
    assert ((kv[..., d_nope:] - back[..., d_nope:]).abs() <= kv[..., d_nope:].abs() * 2.0 ** -8).all()
    # Quantizing what was dequantized changes nothing (scales are powers of two).
    again = quant.unpack_mla_kv(quant.pack_mla_kv(back, fmt), fmt, out_dtype=torch.float32)
    assert torch.equal(again, back)
    # bf16 dequant is exact for these formats.
    assert torch.equal(quant.unpack_mla_kv(quant.pack_mla_kv(kv, fmt), fmt).float(), back)


def test_gather_reads_only_its_tokens_and_padded_block_stride():
    torch.manual_seed(3)
    nb, pbs = 3, 4
    kv = torch.randn(nb, pbs, 1, 512)
    packed = quant.pack_mla_kv(kv, "fp8_model1")
    full = quant.unpack_mla_kv(packed, "fp8_model1", torch.float32).view(nb * pbs, 512)
    # FlashMLA pads each block to a multiple of 576 bytes: same bytes, larger block stride.
    stride = (pbs * 584 + 575) // 576 * 576
    buf = torch.full((nb, stride), 0xFF, dtype=torch.uint8)
    buf[:, :pbs * 584] = packed.view(nb, -1)
    padded = buf[:, :pbs * 584].view(nb, pbs, 1, 584)
    assert padded.stride(0) == stride
    ids = torch.tensor([11, 0, 5, 5, 7], dtype=torch.int32)
    got = quant.gather_mla_kv(padded, "fp8_model1", ids)
    assert torch.equal(got, full[ids.long()])
    # NaN bytes in other tokens are never read.
    poisoned = packed.clone().view(nb, -1)
    poisoned[0, 576:2 * 576] = 0xFF  # token 1's data
    poisoned[0, pbs * 576 + 8: pbs * 576 + 16] = 0xFF  # token 1's scales
    got = quant.gather_mla_kv(poisoned.view(nb, pbs, 1, 584), "fp8_model1", torch.tensor([0, 2]))
    assert torch.isfinite(got).all() and torch.equal(got, full[[0, 2]])
    with pytest.raises(ValueError, match="token ids"):
        quant.gather_mla_kv(packed, "fp8_model1", torch.tensor([12]))


def test_mla_argument_errors():
    with pytest.raises(ValueError, match="kv_format"):
        quant.pack_mla_kv(torch.randn(1, 2, 1, 576), "fp8_v64")
    with pytest.raises(ValueError, match="bf16"):
        quant.pack_mla_kv(torch.randn(1, 2, 1, 576), "bf16")
    with pytest.raises(ValueError, match=r"\[num_blocks, page_block_size, 1, 512\]"):
        quant.pack_mla_kv(torch.randn(1, 2, 1, 576), "fp8_model1")
    with pytest.raises(TypeError, match="uint8"):
        quant.unpack_mla_kv(torch.randn(1, 2, 1, 656), "fp8_v32")
    with pytest.raises(ValueError, match="656"):
        quant.unpack_mla_kv(torch.zeros(1, 2, 1, 584, dtype=torch.uint8), "fp8_v32")


@pytest.mark.parametrize("symmetric", [False, True])
def test_int8_per_channel(symmetric):
    torch.manual_seed(4)
    x = torch.randn(5, 7, 2, 16) * torch.rand(2, 16) * 4 + torch.randn(2, 16)  # [.., H_kv, D]
    x[0, 0, 1, 3] = float("nan")  # an unused slot: ignored in the statistics, quantizes to 0
    q, scale, offset = quant.quantize_kv_int8(x, symmetric=symmetric)
    assert q.dtype == torch.int8 and q.shape == x.shape and scale.shape == (2, 16)
    assert q[0, 0, 1, 3] == 0
    finite = torch.isfinite(x)
    if symmetric:
        assert offset is None
        back = q.float() * scale
    else:
        assert offset.shape == (2, 16)
        back = (q.float() + offset) * scale
        # Each channel's min and max land on the ends of the int8 range.
        xs, qs = x.flatten(0, 1), q.flatten(0, 1)
        lo_at = torch.where(torch.isfinite(xs), xs, math.inf).argmin(0, keepdim=True)
        hi_at = torch.where(torch.isfinite(xs), xs, -math.inf).argmax(0, keepdim=True)
        assert (qs.gather(0, lo_at) == -128).all() and (qs.gather(0, hi_at) == 127).all()
    err = (back - x).abs()[finite.expand_as(x)]
    bound = (scale * 0.5 * (1 + 1e-5)).expand_as(x)[finite]
    assert (err <= bound).all()
    assert torch.allclose(quant.dequantize_kv(q, scale, offset), back)


def test_fp8_per_channel():
    torch.manual_seed(5)
    x = torch.randn(3, 8, 2, 32) * 20
    x[2, 7] = float("nan")
    q, scale = quant.quantize_kv_fp8(x)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (2, 32)
    assert torch.isnan(q[2, 7].float()).all()  # NaN stays NaN
    back = quant.dequantize_kv(q, scale)
    ok = torch.isfinite(x)
    assert ((back - x).abs()[ok] <= _e4m3_bound(x, scale)[ok] * (1 + 1e-6)).all()
    assert torch.allclose(back[ok], (q.float() * scale)[ok])


def test_dequantize_kv_errors():
    q8 = torch.zeros(4, 2, 8, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"scale must be \[H_kv, D\]"):
        quant.dequantize_kv(q8, torch.ones(2, 4))
    with pytest.raises(ValueError, match="scale is required"):
        quant.dequantize_kv(q8, None)
    with pytest.raises(ValueError, match="offset applies to int8"):
        quant.dequantize_kv(q8.to(torch.float8_e4m3fn), torch.ones(2, 8), torch.ones(2, 8))
    with pytest.raises(TypeError, match="int8 or float8_e4m3fn"):
        quant.dequantize_kv(torch.zeros(4, 2, 8), torch.ones(2, 8))
    with pytest.raises(TypeError, match="floating-point"):
        quant.quantize_kv_int8(q8)
