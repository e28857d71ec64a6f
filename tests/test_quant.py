"""Cache formats: exact byte layouts of the MLA FP8 and int8 formats, the scale rules, round-trip
error bounds, conversion between formats, and IFA per-channel int8 / fp8 quantization."""

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
    assert quant.MLA_FORMATS == {"bf16": 1152, "fp8_v32": 656, "fp8_model1": 584, "int8_v32": 656}
    assert quant.MLA_D_QK == {"bf16": 576, "fp8_v32": 576, "fp8_model1": 512, "int8_v32": 576}
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


def test_int8_v32_layout_bytes():
    """Token = [512 int8 | 4 fp32 scales | 64 bf16 RoPE]; scale = amax / 127 per 128 values,
    value = clamp(round_half_even(x / scale), -127, 127); all-zero tile: scale 0, zeros;
    a tile with NaN / inf: scale NaN, zeros."""
    torch.manual_seed(5)
    nb, pbs = 3, 4
    kv = torch.randn(nb, pbs, 1, 576)
    kv[..., :512] *= torch.tensor([0.01, 1.0, 30.0, 500.0]).repeat_interleave(128)
    kv[1, 2, 0, 128:256] = 0.0
    kv[2, 0, 0, 300] = float("nan")
    kv[2, 1, 0, 5] = float("-inf")
    x = kv.to(torch.bfloat16).float()
    packed = quant.pack_mla_kv(kv.to(torch.bfloat16), "int8_v32")
    assert packed.dtype == torch.uint8 and packed.shape == (nb, pbs, 1, 656)
    for b in range(nb):
        for t in range(pbs):
            row = packed[b, t, 0]
            scales = row[512:528].clone().view(torch.float32)
            values = row[:512].clone().view(torch.int8)
            for tile in range(4):
                vals = x[b, t, 0, tile * 128:(tile + 1) * 128]
                got_s, got_v = float(scales[tile]), values[tile * 128:(tile + 1) * 128]
                if not torch.isfinite(vals).all():
                    assert math.isnan(got_s) and not got_v.any()
                    continue
                s = float(torch.tensor(float(vals.abs().max())) / 127.0)
                assert got_s == s
                if s == 0.0:
                    assert not got_v.any()
                    continue
                expect = torch.round(vals / torch.tensor(s)).clamp(-127, 127).to(torch.int8)
                assert torch.equal(got_v, expect)
                assert int(got_v.abs().max()) == 127
            assert torch.equal(row[528:656], x[b, t, 0, 512:].to(torch.bfloat16).view(torch.uint8))
    assert float(packed[1, 2, 0, 516:520].clone().view(torch.float32)) == 0.0
    back = quant.unpack_mla_kv(packed, "int8_v32", torch.float32)
    assert bool(back[2, 0, 0, 256:384].isnan().all()) and bool(back[2, 0, 0, :256].isfinite().all())
    assert bool(back[2, 1, 0, :128].isnan().all()) and torch.equal(back[1, 2, 0, 128:256], torch.zeros(128))


def test_int8_v32_round_trip_error_bound():
    """|x - dequant| <= scale / 2 (+ fp32 rounding of the product); dequant = int8 * scale."""
    torch.manual_seed(6)
    kv = torch.randn(4, 16, 1, 576) * torch.rand(4, 16, 1, 1) * 10
    packed = quant.pack_mla_kv(kv, "int8_v32")
    back = quant.unpack_mla_kv(packed, "int8_v32", out_dtype=torch.float32)
    scale = packed[..., 512:528].contiguous().view(torch.float32).repeat_interleave(128, dim=-1)
    err = (kv[..., :512] - back[..., :512]).abs()
    assert (err <= scale * (0.5 + 1e-5)).all()
    values = packed[..., :512].contiguous().view(torch.int8).float()
    assert torch.equal(back[..., :512], values * scale)
    assert ((kv[..., 512:] - back[..., 512:]).abs() <= kv[..., 512:].abs() * 2.0 ** -8).all()
    # bf16 out: the fp32 dequant rounded once.
    assert torch.equal(quant.unpack_mla_kv(packed, "int8_v32"), back.to(torch.bfloat16))
    # gather reads the same values token by token.
    ids = torch.tensor([63, 0, 17, 17])
    assert torch.equal(quant.gather_mla_kv(packed, "int8_v32", ids), back.view(-1, 576)[ids])


def test_convert_fp8_int8():
    """convert_mla_kv = dequantize + requantize with the target's rule; lossy across fp8 / int8,
    exact for a copy and for fp8 -> bf16."""
    torch.manual_seed(7)
    kv = (torch.randn(3, 8, 1, 576) * 3).to(torch.bfloat16)
    fp8 = quant.pack_mla_kv(kv, "fp8_v32")
    i8 = quant.convert_mla_kv(fp8, src="fp8_v32", dst="int8_v32")
    fp8_values = quant.unpack_mla_kv(fp8, "fp8_v32", torch.float32)
    assert torch.equal(i8, quant.pack_mla_kv(fp8_values, "int8_v32"))
    i8_values = quant.unpack_mla_kv(i8, "int8_v32", torch.float32)
    # the int8 requantization error of the fp8 values: half an int8 step of the tile
    scale = i8[..., 512:528].contiguous().view(torch.float32).repeat_interleave(128, dim=-1)
    assert ((i8_values[..., :512] - fp8_values[..., :512]).abs() <= scale * (0.5 + 1e-5)).all()
    assert torch.equal(i8_values[..., 512:], fp8_values[..., 512:])  # RoPE bf16 in both
    back = quant.convert_mla_kv(i8, src="int8_v32", dst="fp8_v32")
    assert torch.equal(back, quant.pack_mla_kv(i8_values, "fp8_v32"))
    assert not torch.equal(back, fp8)  # lossy both ways
    assert torch.equal(quant.convert_mla_kv(fp8, src="fp8_v32", dst="fp8_v32"), fp8)
    assert torch.equal(quant.convert_mla_kv(fp8, src="fp8_v32", dst="bf16").float(), fp8_values)
    assert torch.equal(quant.convert_mla_kv(kv, src="bf16", dst="int8_v32"), quant.pack_mla_kv(kv, "int8_v32"))
    # NaN tiles stay NaN
    poisoned = fp8.clone()
    poisoned[0, 1, 0, 3] = 0x7F  # an e4m3 NaN
    out = quant.unpack_mla_kv(quant.convert_mla_kv(poisoned, src="fp8_v32", dst="int8_v32"), "int8_v32")
    assert bool(out[0, 1, 0, :128].isnan().all()) and bool(out[0, 1, 0, 128:].isfinite().all())


def test_convert_errors():
    fp8 = quant.pack_mla_kv(torch.randn(1, 2, 1, 576), "fp8_v32")
    with pytest.raises(ValueError, match="kv_format"):
        quant.convert_mla_kv(fp8, src="fp8_v32", dst="int4")
    with pytest.raises(ValueError, match="d_qk 512"):
        quant.convert_mla_kv(fp8, src="fp8_v32", dst="fp8_model1")
    with pytest.raises(TypeError, match="uint8"):
        quant.convert_mla_kv(torch.randn(1, 2, 1, 656), src="int8_v32", dst="fp8_v32")
    with pytest.raises(ValueError, match="656"):
        quant.convert_mla_kv(torch.zeros(1, 2, 1, 584, dtype=torch.uint8), src="int8_v32", dst="fp8_v32")
    with pytest.raises(TypeError):
        quant.convert_mla_kv(fp8, "fp8_v32", "int8_v32")  # src / dst by keyword


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
    with pytest.raises(ValueError, match=r"\[num_blocks, page_block_size, 1, 576\]"):
        quant.pack_mla_kv(torch.randn(1, 2, 1, 512), "int8_v32")
    with pytest.raises(TypeError, match="floating-point"):
        quant.pack_mla_kv(torch.zeros(1, 2, 1, 576, dtype=torch.int8), "int8_v32")
    with pytest.raises(TypeError, match="'int8_v32' must be uint8"):
        quant.unpack_mla_kv(torch.zeros(1, 2, 1, 656, dtype=torch.int8), "int8_v32")


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
