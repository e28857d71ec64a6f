"""The variant matrix of each op as parity cases.

A case is a named recipe for one call of a public op: ``build(generator)`` returns the call's
keyword arguments as CPU tensors (logical values, contiguous); ``strided`` names the arguments
handed to backends as non-contiguous views; ``exercises`` says in words what the case tests.
Which schema features it has (and so which backends support it) is computed from the built
inputs by ``dualops.schema.validate``, never restated here.

``quick`` cases run by default (a few seconds per op on the CPU); ``--full`` adds the rest.
Cases with the same ``data`` draw the same logical values: the MLA format pairs below hold one
bf16 cache stored as ``fp8_v32`` and as ``int8_v32`` (``FORMAT_PAIRS``).
Shapes keep to what the kernels' capabilities allow (head dims 64/128/256, page sizes multiples
of 16, K multiples of 16) unless a case is about a limit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import quant
from . import builders as bld
from .ifa_inputs import ifa_inputs

OPS = ("incre_flash_attention", "mla_decode", "grouped_gemm")

_DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass(frozen=True)
class Case:
    op: str
    name: str
    build: Callable[[torch.Generator], dict] = field(repr=False, compare=False)
    exercises: tuple[str, ...] = ()
    quick: bool = True
    strided: tuple[str, ...] = ()
    data: str = ""   # the name the inputs' generator is seeded with (default: the case's own)

    def inputs(self, seed: int) -> dict:
        """The call's keyword arguments for ``seed`` (see the module docstring)."""
        return self.build(bld.generator(seed, self.op, self.data or self.name))


# ----------------------------------------------------------------------------- IFA


def _ifa(name, *, B, lens, h_q, h_kv, d, s_q=1, layout="paged", block_size=16, dtype="bf16",
         kv="same", causal=False, mask=None, pse=None, pse_dtype="fp32", strided_q=False,
         s_max=None, scale=None, quick=True) -> Case:
    """mask / pse: which of the dims [B, H_q, S_q, S_kv] the tensor has (others broadcast, size 1)."""
    assert len(lens) == B
    S = s_max or max(max(lens), s_q, 1)
    tags = [f"{layout}" + (f" block_size={block_size}" if layout == "paged" else ""),
            f"H_q={h_q} H_kv={h_kv} (group {h_q // h_kv})", f"D={d}", f"q {dtype}",
            f"kv_lens={list(lens)}", "poisoned unused cache slots"]
    if layout == "paged":
        tags.append("randomly permuted block table")
    if 0 in lens or 1 in lens:
        tags.append("0/1-token requests")
    if h_q % 2 or h_kv % 2:
        tags.append("odd head count")
    tags += [t for t, on in ((f"causal S_q={s_q}", causal), (f"S_q={s_q}", s_q > 1 and not causal),
                             (f"atten_mask over {mask}", mask), (f"pse_shift {pse_dtype} over {pse}", pse),
                             ("non-contiguous q", strided_q), (f"softmax_scale={scale}", scale),
                             ({"int8": "int8 KV (scale + offset / symmetric)", "fp8": "fp8 e4m3 KV"}.get(kv),
                              kv != "same")) if on]

    def build(g):
        return ifa_inputs(g, B=B, lens=lens, h_q=h_q, h_kv=h_kv, d=d, s_q=s_q, s_max=S, dtype=_DT[dtype], kv=kv,
                          int8_offsets="k", block_size=block_size if layout == "paged" else 0, causal=causal,
                          mask=mask, pse=pse, pse_dtype=_DT[pse_dtype], softmax_scale=scale)

    return Case("incre_flash_attention", name, build, tuple(tags), quick, ("q",) if strided_q else ())


_IFA_CASES = [
    _ifa("contig_gqa4_d128_bf16", B=3, lens=(0, 1, 37), s_max=40, h_q=8, h_kv=2, d=128,
         layout="contiguous", strided_q=True),
    _ifa("paged16_gqa4_d128_bf16", B=4, lens=(0, 1, 50, 33), h_q=8, h_kv=2, d=128, block_size=16),
    _ifa("paged64_mqa5_d64_fp16", B=3, lens=(1, 70, 0), h_q=5, h_kv=1, d=64, block_size=64,
         dtype="fp16"),
    _ifa("contig_mha3_d256_bf16", B=2, lens=(5, 1), s_max=8, h_q=3, h_kv=3, d=256,
         layout="contiguous"),
    _ifa("paged32_causal_sq3_gqa2_d128", B=3, lens=(1, 40, 3), s_q=3, h_q=4, h_kv=2, d=128,
         block_size=32, causal=True),
    _ifa("contig_mask_pse_gqa2_d64", B=2, lens=(9, 30), s_max=32, h_q=4, h_kv=2, d=64,
         layout="contiguous", mask="bk", pse="hk"),
    _ifa("paged16_int8_gqa4_d128", B=3, lens=(0, 17, 45), h_q=8, h_kv=2, d=128, kv="int8"),
    _ifa("contig_fp8_gqa2_d128_fp16", B=2, lens=(1, 24), s_max=24, h_q=4, h_kv=2, d=128,
         layout="contiguous", kv="fp8", dtype="fp16"),
    _ifa("paged16_long_b1_gqa8_d128", B=1, lens=(700,), h_q=8, h_kv=1, d=128),
    # --full only
    _ifa("paged128_varlen_gqa8_d128", B=6, lens=(0, 1, 129, 1000, 255, 640), h_q=16, h_kv=2, d=128,
         block_size=128, quick=False),
    _ifa("contig_gqa16_d128_long", B=2, lens=(2048, 1500), s_max=2048, h_q=32, h_kv=2, d=128,
         layout="contiguous", quick=False),
    _ifa("paged64_group64_d128", B=2, lens=(300, 64), h_q=64, h_kv=1, d=128, block_size=64,
         quick=False),
    _ifa("paged16_causal_sq8_mask_pse_bf16", B=3, lens=(8, 77, 5), s_q=8, h_q=6, h_kv=3, d=64,
         causal=True, mask="bhqk", pse="bqk", pse_dtype="bf16", quick=False),
    _ifa("contig_int8_mask_gqa4_d64", B=3, lens=(0, 60, 31), s_max=64, h_q=8, h_kv=2, d=64,
         layout="contiguous", kv="int8", mask="bhk", quick=False),
    _ifa("paged128_fp8_causal_sq2_d128", B=3, lens=(2, 300, 1), s_q=2, h_q=8, h_kv=1, d=128,
         block_size=128, kv="fp8", causal=True, quick=False),
    _ifa("paged16_d256_gqa2_fp16_strided", B=3, lens=(15, 0, 90), h_q=6, h_kv=3, d=256,
         dtype="fp16", strided_q=True, quick=False),
    _ifa("paged32_mha8_scale_d64", B=2, lens=(33, 64), h_q=8, h_kv=8, d=64, block_size=32,
         scale=0.3, pse="bhqk", quick=False),
    _ifa("paged16_long_b1_mqa_d256", B=1, lens=(3000,), h_q=4, h_kv=1, d=256, quick=False),
]


# ----------------------------------------------------------------------------- MLA


def _mla_pool(g, n_blocks, pbs, d_qk, live):
    """[n_blocks, pbs, 1, d_qk] fp32: the slots in ``live`` (token ids) random, the rest poison."""
    pool = bld.poisoned((n_blocks * pbs, d_qk), torch.float32)
    pool[live] = bld.randn(g, len(live), d_qk)
    return pool.view(n_blocks, pbs, 1, d_qk)


def _mla_format(pool, kv_format, dtype):
    if kv_format == "bf16":
        return pool.to(dtype)
    return quant.pack_mla_kv(pool.to(torch.bfloat16), kv_format)


def _sparse_indices(g, B, s_q, topk, live, capacity, lengths):
    """[B, s_q, topk] int32: valid entries drawn from live tokens, some entries invalid, and
    entries past the topk length pointing anywhere (poison included) since they must be ignored."""
    idx = bld.randint(g, 0, capacity, B, s_q, topk)
    bad = bld.invalid_ids(capacity)
    for b in range(B):
        for i in range(s_q):
            n = lengths[b]
            pick = live[torch.randperm(len(live), generator=g)[:n]]
            idx[b, i, :len(pick)] = pick
            for j in range(0, n, 7):  # sprinkle invalid ids among the valid entries
                idx[b, i, j] = bad[(b + i + j) % len(bad)]
    return idx.to(torch.int32)


def _mla(name, *, B, lens=None, h_q, d_qk=576, s_q=1, pbs=64, dtype="bf16", kv_format="bf16",
         causal=False, topk=None, topk_lens=None, sink=False, extra_topk=None, quick=True, data="") -> Case:
    sparse = topk is not None
    tags = [f"kv_format {kv_format}", f"q {dtype}", f"H_q={h_q}", f"d_qk={d_qk}",
            f"page_block_size={pbs}", "poisoned unused cache slots"]
    if sparse:
        tags += [f"sparse topk={topk}", "invalid indices (-1, int32 min, capacity, int32 max)"]
        if topk_lens is not None:
            tags.append(f"topk_length={list(topk_lens)}")
    else:
        tags += [f"cache_seqlens={list(lens)}", "randomly permuted block table"]
        if 0 in lens or 1 in lens:
            tags.append("0/1-token requests")
    tags += [t for t, on in ((f"causal S_q={s_q}", causal), (f"S_q={s_q}", s_q > 1 and not causal),
                             ("attn_sink with +inf / -inf", sink), ("odd head count", h_q % 2),
                             (f"extra KV pool topk={extra_topk}", extra_topk)) if on]

    def build(g):
        q = bld.randn(g, B, s_q, h_q, d_qk, dtype=_DT[dtype])
        extra = {}
        if sparse:
            n_blocks = 2 * B + 3
            cap = n_blocks * pbs
            live = torch.randperm(cap, generator=g)[: cap * 2 // 3]
            kv = _mla_pool(g, n_blocks, pbs, d_qk, live)
            want = list(topk_lens) if topk_lens is not None else [topk] * B
            extra["indices"] = _sparse_indices(g, B, s_q, topk, live, cap, want)
            if topk_lens is not None:
                extra["topk_length"] = torch.tensor(topk_lens, dtype=torch.int32)
            table = torch.randperm(n_blocks, generator=g)[: 2 * B].view(B, 2).to(torch.int32)
            seqlens = torch.full((B,), pbs, dtype=torch.int32)
            if extra_topk:
                n2 = B + 2
                cap2 = n2 * pbs
                live2 = torch.randperm(cap2, generator=g)[: cap2 // 2]
                extra["extra_kv_cache"] = _mla_format(_mla_pool(g, n2, pbs, d_qk, live2), kv_format,
                                                      _DT[dtype])
                extra["extra_indices"] = _sparse_indices(g, B, s_q, extra_topk, live2, cap2,
                                                         [extra_topk] * B)
        else:
            logical = bld.randn(g, B, max(lens), 1, d_qk)
            (kv,), table = bld.page([logical], lens, pbs, g)
            seqlens = torch.tensor(lens, dtype=torch.int32)
        if sink:
            s = bld.randn(g, h_q)
            s[0], s[-1] = float("inf"), float("-inf")
            extra["attn_sink"] = s
        return dict(q=q, kv_cache=_mla_format(kv, kv_format, _DT[dtype]), block_table=table,
                    cache_seqlens=seqlens, causal=causal, kv_format=kv_format, **extra)

    return Case("mla_decode", name, build, tuple(tags), quick, data=data)


# One logical cache, two storage types: fp8_v32 case name -> (that case, its int8_v32 twin, the
# same call on the unquantized bf16 cache). The three draw the same values (data = the fp8 name).
FORMAT_PAIRS: dict[str, tuple[Case, Case, Case]] = {}


def _v32_pair(name, **kw) -> list[Case]:
    fp8 = _mla(name, kv_format="fp8_v32", **kw)
    int8 = _mla(name.replace("fp8_v32", "int8_v32"), kv_format="int8_v32", data=name, **kw)
    bf16 = _mla(name.replace("fp8_v32", "bf16_cache"), kv_format="bf16", data=name, **kw)
    FORMAT_PAIRS[name] = (fp8, int8, bf16)
    return [fp8, int8]


_MLA_CASES = [
    _mla("dense_bf16_h16", B=3, lens=(0, 1, 150), h_q=16),
    _mla("dense_causal_sq2_h8", B=3, lens=(1, 2, 90), h_q=8, s_q=2, causal=True),
    *_v32_pair("dense_fp8_v32_h16", B=2, lens=(70, 1), h_q=16),
    _mla("dense_fp8_model1_h16", B=2, lens=(0, 100), h_q=16, d_qk=512, kv_format="fp8_model1"),
    _mla("dense_fp16_d512_h5", B=2, lens=(65, 3), h_q=5, d_qk=512, dtype="fp16"),
    _mla("sparse_bf16_topk64_sink", B=3, h_q=16, s_q=2, topk=64, topk_lens=(64, 1, 0), sink=True),
    *_v32_pair("sparse_fp8_v32_extra", B=2, h_q=16, topk=32, extra_topk=16),
    # --full only
    _mla("dense_bf16_h64_varlen", B=4, lens=(1200, 0, 64, 513), h_q=64, quick=False),
    _mla("dense_causal_sq2_h128", B=2, lens=(300, 2), h_q=128, s_q=2, causal=True, quick=False),
    *_v32_pair("dense_fp8_v32_causal_h64", B=3, lens=(2, 200, 64), h_q=64, s_q=2, causal=True, quick=False),
    *_v32_pair("sparse_fp8_v32_fp16_sink_h24", B=3, h_q=24, s_q=2, topk=96, topk_lens=(96, 1, 0), sink=True,
               dtype="fp16", quick=False),
    _mla("dense_bf16_page16_h16", B=3, lens=(17, 1, 100), h_q=16, pbs=16, quick=False),
    _mla("sparse_model1_extra_sink", B=2, h_q=64, d_qk=512, kv_format="fp8_model1", topk=64,
         topk_lens=(30, 64), sink=True, extra_topk=32, quick=False),
    _mla("sparse_bf16_h128_topk128", B=2, h_q=128, s_q=2, topk=128, quick=False),
]


# ----------------------------------------------------------------------------- grouped GEMM


def _gg(name, *, sizes, N, K, dtype="bf16", mode="none", layout="contiguous", m_max=None,
        out_dtype="bf16", strided_x=False, quick=True) -> Case:
    G = len(sizes)
    recipe = {"none": dtype, "per_tensor": "fp8 per-tensor", "rowwise": f"{dtype} rowwise",
              "blockwise": "fp8 blockwise 1x128 / 128x128"}[mode]
    tags = [f"{layout} layout", recipe, f"group sizes {list(sizes)}", f"N={N} K={K}",
            f"out {out_dtype}", "poisoned rows outside every group"]
    if 0 in sizes:
        tags.append("empty group")
    if strided_x:
        tags.append("non-contiguous x")
    in_dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn,
             "int8": torch.int8}[dtype]

    def values(g, *shape):
        if in_dt == torch.int8:
            return bld.randint(g, -127, 128, *shape).to(torch.int8)
        return bld.randn(g, *shape, scale=2.0 if in_dt == torch.float8_e4m3fn else 1.0).to(in_dt)

    def pos_scale(g, *shape):  # positive, varied, never zero
        return (torch.rand(*shape, generator=g) + 0.5) * (0.02 if in_dt == torch.int8 else 0.1)

    def build(g):
        w = values(g, G, N, K)
        extra = {}
        kb, nbk = -(-K // 128), -(-N // 128)
        if layout == "contiguous":
            M = sum(sizes) + 3  # three trailing rows belong to no group
            x = values(g, M, K)
            x[sum(sizes):] = bld.poison_value(in_dt)
            offs = torch.tensor([0] + list(torch.tensor(sizes).cumsum(0)), dtype=torch.int32)
            extra["group_offsets"] = offs
            rows, unused = (M,), slice(sum(sizes), None)
        else:
            mm = m_max or max(sizes)
            x = values(g, G, mm, K)
            for gi, n in enumerate(sizes):
                x[gi, n:] = bld.poison_value(in_dt)
            extra["masked_m"] = torch.tensor(sizes, dtype=torch.int32)
            rows, unused = (G, mm), None
        if mode == "per_tensor":
            extra.update(x_scale=pos_scale(g, 1), w_scale=pos_scale(g, G))
        elif mode == "rowwise":
            extra.update(x_scale=pos_scale(g, *rows), w_scale=pos_scale(g, G, N))
        elif mode == "blockwise":
            extra.update(x_scale=pos_scale(g, *rows, kb), w_scale=pos_scale(g, G, nbk, kb))
        if unused is not None and mode in ("rowwise", "blockwise"):
            extra["x_scale"][unused] = float("nan")
        return dict(x=x, w=w, scale_mode=mode, out_dtype=_DT[out_dtype], **extra)

    return Case("grouped_gemm", name, build, tuple(tags), quick, ("x",) if strided_x else ())


_GG_CASES = [
    _gg("contig_bf16_g4_empty", sizes=(5, 0, 17, 3), N=96, K=128, strided_x=True),
    _gg("contig_fp16_out_fp32_g3", sizes=(1, 30, 0), N=64, K=80, dtype="fp16", out_dtype="fp32"),
    _gg("masked_bf16_g3", sizes=(0, 16, 7), N=96, K=128, layout="masked", m_max=16),
    _gg("contig_fp8_per_tensor_g4", sizes=(9, 1, 0, 12), N=128, K=128, dtype="fp8", mode="per_tensor"),
    _gg("contig_fp8_rowwise_g4", sizes=(4, 13, 0, 8), N=64, K=256, dtype="fp8", mode="rowwise"),
    _gg("contig_int8_rowwise_g3", sizes=(7, 0, 11), N=96, K=192, dtype="int8", mode="rowwise"),
    _gg("contig_fp8_blockwise_g3", sizes=(6, 10, 1), N=160, K=208, dtype="fp8", mode="blockwise"),
    _gg("masked_fp8_blockwise_g2", sizes=(5, 0), N=128, K=256, dtype="fp8", mode="blockwise",
        layout="masked", m_max=8),
    # --full only
    _gg("contig_bf16_g16_sparse_groups", sizes=(0, 40, 0, 0, 3, 1, 0, 64, 0, 2, 0, 0, 17, 0, 5, 0),
        N=256, K=512, quick=False),
    _gg("contig_bf16_k1024_out_fp16", sizes=(33, 65), N=192, K=1024, out_dtype="fp16", quick=False),
    _gg("masked_fp8_rowwise_g4", sizes=(32, 0, 1, 20), N=128, K=384, dtype="fp8", mode="rowwise",
        layout="masked", m_max=32, quick=False),
    _gg("masked_int8_rowwise_g3", sizes=(3, 24, 0), N=64, K=128, dtype="int8", mode="rowwise",
        layout="masked", m_max=24, quick=False),
    _gg("contig_fp8_blockwise_g8_strided", sizes=(16, 0, 3, 40, 1, 0, 9, 27), N=384, K=640,
        dtype="fp8", mode="blockwise", strided_x=True, quick=False),
    _gg("contig_fp8_per_tensor_g6", sizes=(0, 64, 5, 0, 31, 2), N=256, K=256, dtype="fp8",
        mode="per_tensor", quick=False),
]

_ALL = {"incre_flash_attention": _IFA_CASES, "mla_decode": _MLA_CASES, "grouped_gemm": _GG_CASES}


def cases(op: str, *, full: bool = False, names=None) -> list[Case]:
    """The cases of ``op``: quick ones, or all with ``full``; ``names`` picks cases by name from
    all of them (quick or not)."""
    if op not in _ALL:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    everything = _ALL[op]
    if names:
        known = {c.name: c for c in everything}
        missing = [n for n in names if n not in known]
        if missing:
            raise ValueError(f"unknown case(s) {missing} for {op}; known: {sorted(known)}")
        return [known[n] for n in names]
    return [c for c in everything if full or c.quick]


def find(name: str) -> Case | None:
    for op_cases in _ALL.values():
        for c in op_cases:
            if c.name == name:
                return c
    return None
