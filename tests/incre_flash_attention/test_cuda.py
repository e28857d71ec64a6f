"""CUDA incremental flash attention against dualops.reference, by the docs/parity.md method:
NaN in every unused cache slot, randomly permuted block tables, varlen batches with 0- and
1-token requests, non-contiguous q and caches, fresh random inputs per case; plus split-KV
plans forced to odd shapes, CUDA-graph capture of a decode step, and argument errors.

GPU tests skip on a machine without CUDA (the packing tests still run there). The cases whose
names contain "smoke" are the compute-sanitizer subset (scripts/gpu_job.sh)."""
from __future__ import annotations

import zlib

import pytest
import torch

import dualops
from dualops import schema

# (pytest_generate_tests, forced_launch and _forced_launch_override: every test runs under the forced
# launches that name it, ifa_cuda_cases.FORCED_LAUNCHES)
from ifa_cuda_cases import (  # noqa: F401
    BF16, FP16, _backend_kwargs, _id, check, cuda_backend, make_case, multi_wave_case, needs_cuda, _forced_launch_override, forced_launch, pytest_generate_tests)


# ----------------------------------------------------------------------------- CPU-side checks


def test_fast_params_packing_matches_schema():
    vals = dict(q=0x1000, k=0x2000, out=0x3000, kv_lens=7, q_stride_b=-3, num_blocks=1 << 40,
                softmax_scale=0.125, causal=1, q_dtype=2, kv_dtype=4, pse_stride_k=5)
    assert cuda_backend.pack_ifa_params(**vals) == schema.pack_params("incre_flash_attention", "cuda", **vals)
    with pytest.raises(ValueError, match="unknown field"):
        cuda_backend.pack_ifa_params(bogus=1)
    # IfaLaunch packs the pointers per call (the shared ones first, the merge counters after the
    # shared fields) around the rest, packed once
    ptrs = {f: 0x100 * (i + 1) for i, f in enumerate(cuda_backend._PTR_FIELDS + cuda_backend._CALL_PTR_FIELDS)}
    rest = dict(q_stride_b=-3, num_blocks=1 << 40, softmax_scale=0.125, causal=1, q_dtype=2, kv_dtype=4)
    head = cuda_backend._ptr_head()
    run, off = cuda_backend._call_ptrs()
    full = cuda_backend.pack_ifa_params(**rest)
    launch = head.pack(*(ptrs[f] for f in cuda_backend._PTR_FIELDS)) + full[head.size:off] \
        + run.pack(*(ptrs[f] for f in cuda_backend._CALL_PTR_FIELDS)) + full[off + run.size:]
    assert launch == schema.pack_params("incre_flash_attention", "cuda", **ptrs, **rest)
    with pytest.raises(ValueError, match="unknown field"):
        schema.pack_params("incre_flash_attention", merge_counters=1)   # CUDA only


def test_plan_packs_to_the_tiling_header():
    from dualops import devices
    from dualops.tiling import plan_incre_flash_attention

    plan = plan_incre_flash_attention(batch=1, s_q=1, h_q=32, h_kv=8, head_dim=128, max_kv_len=131072,
                                      device=devices.profile("h100"))
    raw = cuda_backend._plan_bytes(plan)
    assert len(raw) == 4 * 28  # IncreFlashAttentionTiling: 28 int32 (18 of the work list, 10 of the launch)
    assert plan.variant == 3 and plan.wave_ctas == 132  # the H100 runs 128k keys in the lockstep kernel
    assert plan.num_splits > 1  # b=1 at 128k must spread over the GPU


def test_status_explains_itself_without_cuda():
    ok, why = cuda_backend.status()
    assert isinstance(ok, bool) and why
    if not torch.cuda.is_available():
        assert not ok and "cuda" in why.lower()

# ----------------------------------------------------------------------------- the variant matrix

# dtype x cache x head dim x layout (heads 8/2, S_q 1, varlen with 0 and 1).
CORE = [dict(dtype=dt, kv=kv, D=D, page=pg)
        for dt in (BF16, FP16) for kv in ("same", "int8", "fp8") for D in (64, 128, 256) for pg in (0, 64)]


@needs_cuda
@pytest.mark.parametrize("case", CORE, ids=[_id(c) for c in CORE])
def test_dtypes_head_dims_layouts(case):
    q, k, v, kw = make_case(B=4, seed=zlib.crc32(_id(case).encode()) % 1000, **case)
    check(q, k, v, kw, name=_id(case))


HEADS = [(1, 1), (4, 4), (8, 1), (12, 4), (32, 8), (64, 8), (40, 5), (128, 128)]


@needs_cuda
@pytest.mark.parametrize("h_q,h_kv", HEADS)
@pytest.mark.parametrize("page", [0, 16])
def test_head_configs(h_q, h_kv, page):
    q, k, v, kw = make_case(B=3, h_q=h_q, h_kv=h_kv, page=page, s_max=80, seed=h_q * 7 + h_kv + page)
    check(q, k, v, kw, name=f"h{h_q}/{h_kv} page{page}")


@needs_cuda
@pytest.mark.parametrize("page", [16, 32, 48, 64, 128, 256])
@pytest.mark.parametrize("kv", ["same", "int8"])
def test_page_sizes(page, kv):
    q, k, v, kw = make_case(B=5, page=page, kv=kv, lens=[0, 1, 300, 17, page + 1], seed=page)
    check(q, k, v, kw, name=f"page{page} {kv}")


# S_q > 1 with causal (MTP): q tiles of 16/32/64 rows, several q tiles per unit.
SQ = [dict(S_q=s, h_q=hq, h_kv=hk, D=D, causal=c)
      for (s, hq, hk, D, c) in [(2, 8, 2, 128, True), (3, 8, 2, 128, True), (4, 8, 1, 128, True),
                                (8, 16, 2, 128, True), (8, 8, 1, 64, True), (5, 12, 2, 256, True),
                                (8, 32, 4, 64, True), (6, 4, 4, 128, False), (8, 64, 8, 128, True)]]


@needs_cuda
@pytest.mark.parametrize("case", SQ, ids=[_id(c) for c in SQ])
@pytest.mark.parametrize("page", [0, 64])
def test_multi_token_queries(case, page):
    q, k, v, kw = make_case(B=3, page=page, lens=[2, 70, case["S_q"] - 1], seed=case["S_q"] + page, **case)
    check(q, k, v, kw, name=_id(case))


# (pse "bqk" in fp16: [B, 1, S_q, S_kv])
MASKS = [dict(mask=m, pse=p, S_q=s, causal=c, **({"pse_dtype": FP16} if p == "bqk" else {}))
         for (m, p, s, c) in [("full", None, 1, False), ("per_batch", None, 2, True), (None, "full", 1, False),
                              (None, "per_head", 3, True), ("per_head_q", "bqk", 4, False),
                              ("full", "full", 2, False)]]


@needs_cuda
@pytest.mark.parametrize("case", MASKS, ids=[_id(c) for c in MASKS])
@pytest.mark.parametrize("page", [0, 32])
@pytest.mark.parametrize("kv", ["same", "fp8"])
def test_masks_and_bias(case, page, kv):
    q, k, v, kw = make_case(B=3, page=page, kv=kv, seed=len(_id(case)) + page, **case)
    check(q, k, v, kw, name=_id(case))


@needs_cuda
@pytest.mark.parametrize("q_layout", ["slice", "bhsd"])
@pytest.mark.parametrize("fused_kv", [False, True])
def test_non_contiguous_inputs(q_layout, fused_kv):
    q, k, v, kw = make_case(B=3, q_layout=q_layout, fused_kv=fused_kv, S_q=2, causal=True, seed=3)
    assert not q.is_contiguous()
    check(q, k, v, kw, name=f"{q_layout} fused={fused_kv}")


@needs_cuda
def test_int8_symmetric_and_custom_scale():
    q, k, v, kw = make_case(B=3, kv="int8", int8_offset=False, softmax_scale=0.3, seed=11)
    assert "k_offset" not in kw or kw["k_offset"] is None
    check(q, k, v, kw, name="int8 symmetric")


@needs_cuda
def test_all_requests_empty():
    q, k, v, kw = make_case(B=2, lens=[0, 0], s_max=32, seed=5)
    out, lse = check(q, k, v, kw, name="empty")
    assert torch.all(out == 0) and torch.all(torch.isinf(lse) & (lse > 0))


# 8-bit caches with several q rows per KV head: one m-tile (the int8 key-offset term summed from
# registers) and several (summed per row from memory), the fp8 value scales of 1-4 store rounds.
Q8 = [dict(kv=kv, int8_offset=off, S_q=s, h_q=hq, h_kv=hk, D=D)
      for (kv, off) in [("int8", True), ("int8", False), ("fp8", True)]
      for (s, hq, hk, D) in [(1, 8, 1, 64), (2, 16, 2, 128), (4, 8, 1, 128), (8, 16, 2, 128), (3, 12, 2, 256)]]


@needs_cuda
@pytest.mark.parametrize("case", Q8, ids=[f"{c['kv']}{'' if c['int8_offset'] else '-sym'}-" + _id(
    {k: v for k, v in c.items() if k not in ("kv", "int8_offset")}) for c in Q8])
def test_8bit_query_rows(case):
    q, k, v, kw = make_case(B=3, causal=case["S_q"] > 1, lens=[case["S_q"], 77, 301],
                            seed=case["S_q"] * 13 + case["D"], **case)
    check(q, k, v, kw, name=str(case))

# ----------------------------------------------------------------------------- errors


@needs_cuda
def test_misaligned_cache_is_refused():
    q, k, v, kw = make_case(B=2, D=64, s_max=32, lens=[5, 9], seed=1)
    big = torch.randn(2, 32, 2, 64 + 4, device="cuda").to(BF16)
    k_bad = big[..., 4:]  # head rows 136 B apart: not a multiple of 16 B
    with pytest.raises(ValueError, match="16"):
        cuda_backend.incre_flash_attention(q, k_bad, v, plan=None, **_backend_kwargs(q, k, kw))


@needs_cuda
def test_plan_for_other_shapes_is_refused():
    q, k, v, kw = make_case(B=2, s_max=64, lens=[5, 9], seed=2)
    q2, k2, _, _ = make_case(B=2, s_max=128, lens=[5, 9], seed=2)
    other = cuda_backend.make_ifa_plan(q2, k2, None)
    with pytest.raises(ValueError, match="max_kv_len"):
        cuda_backend.incre_flash_attention(q, k, v, plan=other, **_backend_kwargs(q, k, kw))


@needs_cuda
def test_unsupported_head_dim_names_backend():
    q = torch.randn(1, 1, 4, 96, device="cuda", dtype=BF16)
    k = torch.randn(1, 16, 4, 96, device="cuda", dtype=BF16)
    with pytest.raises(NotImplementedError, match="cuda"):
        dualops.incre_flash_attention(q, k, k, backend="cuda")


# ----------------------------------------------------------------------------- sanitizer subset

SMOKE = [dict(kv="same", page=0, lens=[0, 1, 2500], h_q=8, h_kv=1),          # split, merged in-kernel
         dict(kv="same", page=0, lens=[0, 9000, 3], h_q=8, h_kv=1, D=256),   # split + combine kernel
         dict(kv="same", page=64, lens=[5, 130, 64], h_q=8, h_kv=2),          # paged, no split
         dict(kv="int8", page=0, lens=[0, 33, 90], h_q=8, h_kv=2),
         dict(kv="fp8", page=32, lens=[1, 70, 2100], h_q=4, h_kv=1),
         dict(kv="same", page=0, lens=[4, 40, 90], h_q=16, h_kv=2, S_q=4, causal=True, mask="full", pse="full")]


@needs_cuda
@pytest.mark.parametrize("kv", ["same", "int8"])
def test_smoke_multi_wave(kv):
    """A grid of many short units (narrow CTAs where the GPU calls for them, see above)."""
    (q, k, v, kw), _ = multi_wave_case(98, kv=kv, page=0)
    check(q, k, v, kw, name=f"smoke multi-wave {kv}")


@needs_cuda
@pytest.mark.parametrize("case", SMOKE, ids=[f"smoke{i}" for i in range(len(SMOKE))])
def test_smoke(case):
    q, k, v, kw = make_case(B=3, seed=99, **case)
    check(q, k, v, kw, name="smoke")
