"""CUDA MLA decode's non-finite values against dualops.reference: NaN in attended keys and q
propagates (through split merges too), +inf keys, keys hidden by the causal mask that hold NaN /
inf, and fp8_model1's special scale codes. GPU tests skip on a machine without an sm_90 GPU."""
from __future__ import annotations

import pytest
import torch

from dualops.parity import builders as bld
from mla_cuda_cases import BF16, FP16, check, kernel, make_inputs, needs_cuda, set_key, skip_duplicate, split_plan  # noqa: F401


# ----------------------------------------------------------------------------- NaN semantics


@needs_cuda
@pytest.mark.parametrize("fmt", ["bf16", "fp8_v32", "int8_v32"])
def test_nan_in_attended_key_and_q_propagates(fmt):
    """A NaN in an attended key of a split request and in one q head: the reference's NaN rows
    must come out NaN (also through the split merge), the others must not."""
    g = bld.generator(2, "mla_decode", f"cuda/nan/{fmt}")
    a = make_inputs(g, lens=(3000, 40), h_q=16, s_q=2, kv_format=fmt, causal=True)
    blk = int(a["block_table"][0, 1000 // 64])
    if fmt == "bf16":
        a["kv_cache"][blk, 1000 % 64, 0, 3] = float("nan")  # NoPE dim: all rows see it in S and V
        a["kv_cache"][int(a["block_table"][1, 0]), 39, 0, 600 - 64] = float("nan")  # last key, RoPE dim: only query 1 sees it
    elif fmt == "fp8_v32":
        a["kv_cache"][blk, 1000 % 64, 0, 3] = 0x7F  # e4m3 NaN
    else:
        set_key(a, 0, 1000, 3, float("nan"))  # int8 has no NaN: a NaN scale (NoPE values 0 .. 127)
    a["q"][1, 0, 5, 7] = float("nan")
    out, lse = check(a, plan="host")
    assert torch.isnan(out[0]).all()
    assert torch.isnan(out[1, 0, 5]).all() and not torch.isnan(out[1, 0, 4]).any()


@needs_cuda
@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_inf_key_like_reference_through_split_merge(dtype, kernel):
    """A +inf in an attended key: rows scoring it +inf get lse +inf and out NaN (an infinite max
    subtracts 0, as torch.logsumexp), rows scoring it -inf keep a finite lse (out NaN only where
    0 * inf meets a value column); through the split merge (request 0) and without (request 1)."""
    g = bld.generator(3, "mla_decode", f"cuda/inf_key/{dtype}")
    a = make_inputs(g, lens=(3000, 40), h_q=16, kv_format="bf16", dtype=dtype)
    split_plan(a)
    set_key(a, 0, 1000, 11, float("inf"))    # value column: all rows' out NaN
    set_key(a, 1, 7, 560, float("inf"))      # RoPE column: only the +inf rows
    out, lse = check(a, plan="host")
    out, pos = out.cpu(), torch.isposinf(lse.cpu())
    assert pos[0].any() and pos[1].any() and not pos.all() and not lse.isnan().any()
    for b in range(2):
        assert torch.isnan(out[b][pos[b].transpose(0, 1)]).all()  # +inf score: p = inf - inf
        assert torch.isfinite(out[b][~pos[b].transpose(0, 1)][:, :11]).all()
    assert torch.isnan(out[0, ..., 11]).all()                  # weight 0 times the inf value


@needs_cuda
@pytest.mark.parametrize("fmt,h_q", [("bf16", 5), ("bf16", 16), ("fp8_v32", 5), ("fp8_model1", 16), ("int8_v32", 5)])
def test_causal_hidden_nonfinite_keys_do_not_reach_out(fmt, h_q, kernel):
    """Causal s_q = 3: NaN / inf in keys hidden from the early query rows (the last tile of a
    split request and of a short one) reach only the rows that attend them: masked keys are left
    out of P V, not multiplied by 0. h_q 5 mixes query positions inside one MMA row group."""
    g = bld.generator(h_q, "mla_decode", f"cuda/causal_hidden/{fmt}")
    a = make_inputs(g, lens=(3000, 70), h_q=h_q, s_q=3, kv_format=fmt, causal=True)
    split_plan(a)
    bf16 = fmt == "bf16"
    bad = 0x7F if fmt.startswith("fp8") else float("nan")  # e4m3 NaN (e4m3 has no inf); int8_v32: a NaN scale
    set_key(a, 0, 2999, 5, bad)                          # seen by query 2 only
    set_key(a, 0, 2998, 300, float("inf") if not fmt.startswith("fp8") else bad)  # seen by queries 1, 2
    set_key(a, 1, 69, 100, bad)                          # seen by query 2 only
    set_key(a, 1, 68, 400, float("-inf") if bf16 else bad)
    skip_duplicate(kernel, fmt)
    out, lse = check(a, plan="host")
    out, lse = out.cpu(), lse.cpu()
    assert torch.isfinite(out[:, 0]).all() and torch.isfinite(lse[:, :, 0]).all()
    assert torch.isnan(out[:, 2]).all() and torch.isnan(lse[:, :, 2]).all()


@needs_cuda
@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_model1_zero_and_nan_scales_like_reference(dtype, kernel):
    """fp8_model1 e8m0 scale bytes 0 (2^-127) and 255 (NaN) dequantize as the reference does (the
    kernels read the other codes as the floats with bits e << 23): a NaN scale in an attended
    token makes every row NaN; 2^-127 scales leave the rest of the request finite."""
    g = bld.generator(4, "mla_decode", f"cuda/model1_scales/{dtype}")
    a = make_inputs(g, lens=(300, 70), h_q=16, kv_format="fp8_model1", dtype=dtype)
    pbs = a["kv_cache"].shape[1]
    flat = a["kv_cache"].view(a["kv_cache"].shape[0], -1)

    def set_scale(b, pos, j, code):  # e8m0 scale of 64-dim block j of request b's token pos
        blk, off = int(a["block_table"][b, pos // pbs]), pos % pbs
        flat[blk, pbs * 576 + off * 8 + j] = code

    set_scale(0, 123, 2, 255)
    set_scale(1, 7, 5, 0)
    set_scale(1, 69, 0, 0)
    set_scale(1, 69, 6, 0)
    out, _ = check(a, plan="host")
    out = out.cpu()
    assert torch.isnan(out[0]).all() and torch.isfinite(out[1]).all()
