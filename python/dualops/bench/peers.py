"""Peer implementations timed beside dualops: one small adapter per peer and op, each taking the
inputs of our call (the public-API keyword arguments a bench workload builds) and returning a
no-argument callable that runs the same computation -- or a string saying why it cannot run here.

Peers are detected at run time and never dependencies: an absent package, an unsupported variant
or a peer that fails while being prepared shows as ``n/a`` with the reason, never as a crash.

| op | peers |
|---|---|
| incre_flash_attention | torch SDPA; FlashInfer paged decode (CUDA); torch_npu ``npu_incre_flash_attention`` and ``npu_fused_infer_attention_score`` (NPU) |
| mla_decode | torch (bmm, softmax, bmm); FlashMLA ``flash_mla``; FlashInfer MLA decode; FlagGems ``flash_mla`` (CUDA); torch_npu ``npu_fused_infer_attention_score`` (MLA path) and ``torch_npu.atb.npu_multi_head_latent_attention`` (NPU) |
| grouped_gemm | ``torch._grouped_mm``, ``torch._scaled_grouped_mm``; FlashInfer segment GEMM; FlagGems grouped GEMM (CUDA); torch_npu ``npu_grouped_matmul`` (NPU) |

FlashMLA and FlashInfer come from the GPU peers kit when it is importable (``peer_flashmla`` /
``peer_flashinfer``, on ``PYTHONPATH`` once the kit's environment script has run), else from the pip
packages ``flash_mla`` / ``flashinfer``. Each adapter does its untimed preparation (layout
conversion, scheduler metadata, ``plan()``) before returning the callable.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import Callable

import torch

D_V = 512
NPU = ("npu", "privateuseone")


def _module(*names: str):
    """The first importable module of ``names``, else a string naming what was tried."""
    errors = []
    for name in names:
        try:
            return importlib.import_module(name)
        except Exception as e:  # ImportError, or a package whose import itself fails
            errors.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160])
    return "not importable (" + "; ".join(errors) + ")"


def _guard(fn: Callable) -> Callable:
    """Adapters never raise: a failure while preparing becomes the n/a reason."""
    def wrapped(shape, inputs):
        try:
            return fn(shape, inputs)
        except Exception as e:
            first = str(e).splitlines()[0] if str(e) else ""
            return f"failed while preparing: {type(e).__name__}: {first}"[:300]
    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


def _device(inputs) -> str:
    first = next(v for v in inputs.values() if isinstance(v, torch.Tensor))
    return first.device.type


def _paged_csr(block_table, lens, page):
    """FlashInfer's page metadata from a block table: (indptr, indices, last_page_len), int32."""
    lens = lens.to(torch.int32)
    pages = (lens + page - 1) // page
    indptr = torch.zeros(lens.numel() + 1, dtype=torch.int32, device=block_table.device)
    indptr[1:] = torch.cumsum(pages, 0)
    cols = torch.arange(block_table.shape[1], device=block_table.device)
    indices = block_table[cols.view(1, -1) < pages.view(-1, 1)].to(torch.int32).contiguous()
    last = torch.where(pages > 0, lens - (pages - 1) * page, torch.zeros_like(lens))
    return indptr, indices, last


def _as_paged(inputs, page=16):
    """(k [pages, page, H, D], v, block_table) of an IFA call's cache; a contiguous [B, S, H, D]
    cache is viewed as B * S / page pages (no copy when S is a multiple of page)."""
    k, v, table = inputs["k_cache"], inputs["v_cache"], inputs.get("block_table")
    if table is not None:
        return k, v, table
    B, S, H, D = k.shape
    if S % page:
        raise ValueError(f"a contiguous cache of {S} keys is not a whole number of {page}-key pages")
    per = S // page
    table = torch.arange(B * per, dtype=torch.int32, device=k.device).view(B, per)
    return k.reshape(B * per, page, H, D), v.reshape(B * per, page, H, D), table


# ----------------------------------------------------------------------------- IFA


@_guard
def ifa_torch_sdpa(s, inputs):
    q = inputs["q"]
    if s["layout"] != "contiguous" or s["kv_dtype"] != s["dtype"]:
        return "needs a contiguous cache of q's dtype"
    qt = q.transpose(1, 2).contiguous()
    kt = inputs["k_cache"].transpose(1, 2).contiguous()
    vt = inputs["v_cache"].transpose(1, 2).contiguous()
    mask = None
    if s["causal"] and s["s_q"] > 1:  # SDPA's is_causal aligns top-left; decode needs bottom-right
        idx = torch.arange(s["s_kv"], device=q.device)
        lim = s["s_kv"] - s["s_q"] + 1 + torch.arange(s["s_q"], device=q.device)
        mask = idx.view(1, -1) < lim.view(-1, 1)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return lambda: sdpa(qt, kt, vt, attn_mask=mask, enable_gqa=True)


@_guard
def ifa_flashinfer(s, inputs):
    if s["s_q"] != 1 or s["kv_dtype"] != s["dtype"]:
        return "FlashInfer's paged decode: one query token, a cache of q's dtype"
    kit = _module("peer_flashinfer")
    q = inputs["q"][:, 0]
    k, v, table = _as_paged(inputs)
    lens = inputs["kv_lens"]
    if not isinstance(kit, str):
        return kit.gqa_decode_paged_runner(q, k, v, table, lens, use_tensor_cores=True)
    fi = _module("flashinfer")
    if isinstance(fi, str):
        return f"neither the peers kit (peer_flashinfer) nor flashinfer is importable: {fi}"
    ws = torch.empty(128 << 20, dtype=torch.uint8, device=q.device)
    w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)
    indptr, indices, last = _paged_csr(table, lens, k.shape[1])
    w.plan(indptr, indices, last, q.shape[1], k.shape[2], q.shape[2], k.shape[1],
           q_data_type=q.dtype, kv_data_type=k.dtype)
    return lambda: w.run(q, (k, v))


def _npu_ifa_call(s, inputs, op, scale_kw, lengths_kw):
    """A timed call of torch_npu's `op` on the call's q, k, v (contiguous caches of q's dtype;
    the two torch_npu entry points name their scale and length arguments differently), or why not."""
    tnpu = _module("torch_npu")
    if isinstance(tnpu, str):
        return tnpu
    if s["layout"] != "contiguous" or s["kv_dtype"] != s["dtype"]:
        return "driven with contiguous caches of q's dtype only"
    q, k, v = inputs["q"], inputs["k_cache"], inputs["v_cache"]
    B, _, H_q, D = q.shape
    kw = {scale_kw: D ** -0.5, lengths_kw: [s["s_kv"]] * B}
    fn = getattr(tnpu, op)
    return lambda: fn(q, k, v, num_heads=H_q, num_key_value_heads=s["h_kv"], input_layout="BSND", **kw)


@_guard
def ifa_torch_npu(s, inputs):
    return _npu_ifa_call(s, inputs, "npu_incre_flash_attention", "scale_value", "actual_seq_lengths")


@_guard
def ifa_torch_npu_fias(s, inputs):
    return _npu_ifa_call(s, inputs, "npu_fused_infer_attention_score", "scale", "actual_seq_lengths_kv")


# ----------------------------------------------------------------------------- MLA


def _mla_dense_bf16(s):
    if s["kv_format"] != "bf16" or s["topk"]:
        return "dense bf16 cache only"
    return None


@_guard
def mla_torch(s, inputs):
    """bmm, softmax, bmm over a contiguous latent cache (made here, outside timing)."""
    if s["kv_format"] != "bf16" or s["topk"] or s["causal"]:
        return "dense bf16 non-causal decode only"
    q, kv, table = inputs["q"], inputs["kv_cache"], inputs["block_table"]
    B, S = s["b"], s["s_k"]
    lat = kv[table.long()].reshape(B, -1, s["d_qk"])[:, :S].contiguous()
    qf = q.reshape(B, s["s_q"] * s["h_q"], s["d_qk"])
    scale = s["d_qk"] ** -0.5

    def run():
        p = torch.softmax(torch.bmm(qf, lat.transpose(1, 2)).float() * scale, dim=-1).to(q.dtype)
        return torch.bmm(p, lat[..., :D_V])
    return run


@_guard
def mla_flash_mla(s, inputs):
    why = _mla_dense_bf16(s)
    if why:
        return f"this adapter drives FlashMLA's {why}"
    q, kv, table, lens = inputs["q"], inputs["kv_cache"], inputs["block_table"], inputs["cache_seqlens"]
    kit = _module("peer_flashmla")
    if not isinstance(kit, str):
        return kit.flashmla_dense_decode_runner(q, kv, table, lens, D_V, causal=s["causal"])
    fm = _module("flash_mla")
    if isinstance(fm, str):
        return f"neither the peers kit (peer_flashmla) nor flash_mla is importable: {fm}"
    meta, splits = fm.get_mla_metadata(lens, s["s_q"] * s["h_q"], 1)
    return lambda: fm.flash_mla_with_kvcache(q, kv, table, lens, D_V, meta, splits, causal=s["causal"])


@_guard
def mla_flashinfer(s, inputs):
    why = _mla_dense_bf16(s)
    if why:
        return f"this adapter drives FlashInfer's MLA with a {why}"
    q, kv, table, lens = inputs["q"], inputs["kv_cache"], inputs["block_table"], inputs["cache_seqlens"]
    kit = _module("peer_flashinfer")
    if not isinstance(kit, str):
        return kit.mla_decode_runner(q, kv, table, lens, D_V, causal=s["causal"], backend="fa3")
    fi = _module("flashinfer")
    if isinstance(fi, str):
        return f"neither the peers kit (peer_flashinfer) nor flashinfer is importable: {fi}"
    if s["s_q"] != 1:
        return "the pip flashinfer path here runs one query token; the peers kit runs more"
    B, page = s["b"], kv.shape[1]
    ws = torch.empty(128 << 20, dtype=torch.uint8, device=q.device)
    w = fi.mla.BatchMLAPagedAttentionWrapper(ws, backend="auto")
    indptr, indices, _ = _paged_csr(table, lens, page)
    qo = torch.arange(B + 1, dtype=torch.int32, device=q.device)
    w.plan(qo, indptr, indices, lens.to(torch.int32), s["h_q"], D_V, s["d_qk"] - D_V, page, False,
           s["d_qk"] ** -0.5, q.dtype, kv.dtype)
    q_nope, q_pe = q[:, 0, :, :D_V].contiguous(), q[:, 0, :, D_V:].contiguous()
    ckv, kpe = kv[:, :, 0, :D_V], kv[:, :, 0, D_V:]
    return lambda: w.run(q_nope, q_pe, ckv, kpe)


@_guard
def mla_flag_gems(s, inputs):
    why = _mla_dense_bf16(s)
    if why:
        return f"FlagGems' flash_mla takes a {why}"
    fg = _module("flag_gems")
    if isinstance(fg, str):
        return fg
    fn = getattr(fg, "flash_mla", None) or getattr(getattr(fg, "ops", None), "flash_mla", None)
    if fn is None:
        return "this flag_gems has no flash_mla"
    if s["s_q"] > 1 and not s["causal"]:
        return "FlagGems' flash_mla is causal only (same as non-causal at s_q 1)"
    q, kv, table, lens = inputs["q"], inputs["kv_cache"], inputs["block_table"], inputs["cache_seqlens"]
    page = kv.shape[1]
    max_pad = table.shape[1] * page
    return lambda: fn(q, table, kv, max_pad, page, s["b"], s["s_q"], lens, s["h_q"], 1, s["d_qk"], D_V, True)


def _npu_mla(s, inputs):
    """torch_npu and the call's dense bf16 MLA inputs split the way torch_npu's MLA entry points
    take them -- latent (512) and RoPE (64) parts of q and of the paged cache apart (copies made
    here, outside timing) -- or why not."""
    tnpu = _module("torch_npu")
    if isinstance(tnpu, str):
        return tnpu, None
    why = _mla_dense_bf16(s)
    if why or s["causal"]:
        return why or "non-causal decode only", None
    q, kv = inputs["q"], inputs["kv_cache"]
    parts = dict(q_nope=q[..., :D_V].contiguous(), q_rope=q[..., D_V:].contiguous(),
                 ckv=kv[..., :D_V].contiguous(), k_rope=kv[..., D_V:].contiguous(),
                 table=inputs["block_table"], lens=inputs["cache_seqlens"].to(torch.int32))
    return tnpu, parts


@_guard
def mla_torch_npu_fias(s, inputs):
    """npu_fused_infer_attention_score's MLA path (query_rope / key_rope over a paged cache)."""
    tnpu, p = _npu_mla(s, inputs)
    if p is None:
        return tnpu
    blocks, page = p["ckv"].shape[:2]
    ckv = p["ckv"].view(blocks, page, D_V)               # [blocks, block_size, H_kv * 512]
    k_rope = p["k_rope"].view(blocks, page, -1)
    lengths = p["lens"].tolist()
    return lambda: tnpu.npu_fused_infer_attention_score(
        p["q_nope"], ckv, ckv, query_rope=p["q_rope"], key_rope=k_rope, num_heads=s["h_q"], num_key_value_heads=1,
        input_layout="BSND", scale=s["d_qk"] ** -0.5, block_table=p["table"], block_size=page,
        actual_seq_lengths_kv=lengths)


@_guard
def mla_torch_npu_atb(s, inputs):
    """torch_npu.atb.npu_multi_head_latent_attention (one query token per request)."""
    tnpu, p = _npu_mla(s, inputs)
    if p is None:
        return tnpu
    mla = getattr(getattr(tnpu, "atb", None), "npu_multi_head_latent_attention", None)
    if mla is None:
        return "this torch_npu has no torch_npu.atb.npu_multi_head_latent_attention"
    if s["s_q"] != 1:
        return "one query token per request only"
    q_nope, q_rope = p["q_nope"][:, 0], p["q_rope"][:, 0]   # [tokens, heads, 512 / 64]
    lens = p["lens"].cpu()
    return lambda: mla(q_nope, q_rope, p["ckv"], p["k_rope"], p["table"], lens, s["h_q"], s["d_qk"] ** -0.5, 1)


# ----------------------------------------------------------------------------- grouped GEMM


def _gg_common(s, inputs):
    x, w = inputs["x"], inputs["w"]
    contiguous = s["layout"] == "contiguous"
    offs = inputs["group_offsets"][1:].contiguous() if contiguous else None
    return x, w, w.transpose(-2, -1), contiguous, offs


@_guard
def gg_torch_grouped_mm(s, inputs):
    if s["recipe"] not in ("bf16", "fp16"):
        return "bf16 / fp16 only"
    if not hasattr(torch, "_grouped_mm"):
        return "not in this torch"
    x, _, wt, contiguous, offs = _gg_common(s, inputs)
    return (lambda: torch._grouped_mm(x, wt, offs=offs)) if contiguous else (lambda: torch._grouped_mm(x, wt))


@_guard
def gg_torch_scaled_grouped_mm(s, inputs):
    if s["recipe"] != "fp8_rowwise" or s["layout"] != "contiguous":
        return "fp8 rowwise, contiguous groups only"
    x, _, wt, _, offs = _gg_common(s, inputs)
    if x.device.type != "cuda" or not hasattr(torch, "_scaled_grouped_mm"):
        return "CUDA (sm90+) only"
    xs, ws = inputs["x_scale"], inputs["w_scale"]
    return lambda: torch._scaled_grouped_mm(x, wt, xs, ws, offs=offs, out_dtype=torch.bfloat16)


@_guard
def gg_flashinfer(s, inputs):
    if s["recipe"] not in ("bf16", "fp16") or s["layout"] != "contiguous":
        return "FlashInfer's segment GEMM: bf16 / fp16, contiguous groups"
    fi = _module("flashinfer")
    if isinstance(fi, str):
        return fi
    x, w, _, _, _ = _gg_common(s, inputs)
    ws = torch.empty(32 << 20, dtype=torch.uint8, device=x.device)
    seg = fi.gemm.SegmentGEMMWrapper(ws)
    indptr = inputs["group_offsets"].to(torch.int64)
    return lambda: seg.run(x, w, w.shape[0], True, seg_indptr=indptr)


@_guard
def gg_flag_gems(s, inputs):
    if s["recipe"] not in ("bf16", "fp16") or s["layout"] != "contiguous":
        return "bf16 / fp16, contiguous groups only"
    fg = _module("flag_gems")
    if isinstance(fg, str):
        return fg
    names = ("group_mm", "grouped_mm", "group_gemm", "grouped_gemm")
    fn = next((getattr(fg, n) for n in names if callable(getattr(fg, n, None))), None)
    if fn is None:
        return f"this flag_gems has no grouped GEMM entry (looked for {', '.join(names)})"
    x, _, wt, _, offs = _gg_common(s, inputs)
    return lambda: fn(x, wt, offs)


@_guard
def gg_torch_npu(s, inputs):
    tnpu = _module("torch_npu")
    if isinstance(tnpu, str):
        return tnpu
    if s["recipe"] not in ("bf16", "fp16") or s["layout"] != "contiguous":
        return "driven with bf16 / fp16 contiguous groups only"
    x, w = inputs["x"], inputs["w"]
    group_list = inputs["group_offsets"][1:].to(torch.int64)
    wt = w.transpose(-2, -1).contiguous()
    return lambda: tnpu.npu_grouped_matmul([x], [wt], group_list=group_list, split_item=2, group_type=0)


# ----------------------------------------------------------------------------- registry

ANY = None
# op -> [(peer name, device types it runs on or ANY, adapter)]
PEERS: dict[str, list[tuple[str, tuple | None, Callable]]] = {
    "incre_flash_attention": [("torch-sdpa", ANY, ifa_torch_sdpa),
                              ("flashinfer-decode", ("cuda",), ifa_flashinfer),
                              ("torch_npu-ifa", NPU, ifa_torch_npu),
                              ("torch_npu-fias", NPU, ifa_torch_npu_fias)],
    "mla_decode": [("torch-naive", ANY, mla_torch),
                   ("flash_mla", ("cuda",), mla_flash_mla),
                   ("flashinfer-mla", ("cuda",), mla_flashinfer),
                   ("flag_gems-mla", ("cuda",), mla_flag_gems),
                   ("torch_npu-fias-mla", NPU, mla_torch_npu_fias),
                   ("torch_npu-atb-mla", NPU, mla_torch_npu_atb)],
    "grouped_gemm": [("torch._grouped_mm", ANY, gg_torch_grouped_mm),
                     ("torch._scaled_grouped_mm", ANY, gg_torch_scaled_grouped_mm),
                     ("flashinfer-segment_gemm", ("cuda",), gg_flashinfer),
                     ("flag_gems-grouped_mm", ("cuda",), gg_flag_gems),
                     ("torch_npu-grouped_matmul", NPU, gg_torch_npu)],
}


def for_call(op: str, shape: dict, inputs: dict) -> dict:
    """{peer name: callable or reason} for the peers of ``op`` that run on the inputs' device type
    (torch's own on every device; the others where their device is)."""
    dev = _device(inputs)
    out = {}
    for name, devs, adapter in PEERS[op]:
        if devs is ANY or dev in devs:
            out[name] = adapter(shape, inputs)
    return out


def names(op: str) -> list[str]:
    return [n for n, _, _ in PEERS[op]]


# The package a peer comes from: its name up to the first "-" or "." (torch-sdpa -> torch), and
# the modules that provide it (the GPU peers kit first, then the pip package).
PACKAGES = {"torch": ("torch",), "flashinfer": ("peer_flashinfer", "flashinfer"),
            "flash_mla": ("peer_flashmla", "flash_mla"), "flag_gems": ("flag_gems",), "torch_npu": ("torch_npu",)}
DEVICE_WORDS = {"cuda": "an NVIDIA GPU", "npu": "an Ascend NPU (torch_npu + CANN)",
                "privateuseone": "an Ascend NPU (torch_npu + CANN)", "cpu": "the CPU"}


def _device_words(devs) -> str:
    return " or ".join(dict.fromkeys(DEVICE_WORDS.get(d, d) for d in devs))


def package(peer: str) -> str:
    return peer.split("-")[0].split(".")[0]


def _importable(pkg: str) -> tuple[bool, str]:
    mods = PACKAGES.get(pkg, (pkg,))
    for m in mods:
        try:
            if importlib.util.find_spec(m) is not None:
                return True, m
        except (ImportError, ValueError):
            continue
    return False, f"{' or '.join(mods)} not installed"


def describe() -> list[dict]:
    """Every peer package with whether it imports here (for ``info`` and the report page)."""
    rows = []
    for key in PACKAGES:
        if key == "torch":
            continue
        ok, what = _importable(key)
        rows.append({"peer": key, "importable": ok, "module": what if ok else "",
                     "reason": "" if ok else f"not installed ({' or '.join(PACKAGES[key])})"})
    return rows


def _runs_on(devs) -> str:
    return "any device" if devs is ANY else _device_words(devs).replace("an ", "").replace(" (torch_npu + CANN)", "")


def _distinct(reasons, n: int = 2) -> str:
    uniq = list(dict.fromkeys(r for r in reasons if r))
    return "; ".join(uniq[:n]) + (f"; and {len(uniq) - n} more reasons" if len(uniq) > n else "")


def catalog(run) -> dict[str, list[dict]]:
    """Every peer of every op a bench run covered: {op: [{peer, package, runs_on, status, reason}]}.
    status: "timed" (in some configs; the reason says where not), "n/a" (why: the variant, a
    missing package, or a device this machine lacks), or "not run" (peers switched off)."""
    peer_rows = [r for r in run.rows if r.source == "peer"]
    peer_device = next((r.device for r in peer_rows), "cpu" if not run.settings.get("accelerated") else None)
    ops = list(dict.fromkeys(info["op"] for info in run.sweeps.values()))
    out = {}
    for op in ops:
        entries = []
        for name, devs, _ in PEERS.get(op, []):
            mine = [r for r in peer_rows if r.op == op and r.impl == name]
            ok = [r for r in mine if r.status == "ok"]
            pkg = package(name)
            e = {"peer": name, "package": pkg, "runs_on": _runs_on(devs)}
            if ok:
                others = [r for r in mine if r.status != "ok"]
                e["status"] = "timed"
                e["reason"] = (f"timed in {len(ok)} of {len(mine)} configs"
                               + (f"; not in the others: {_distinct(r.reason for r in others)}" if others else ""))
            elif mine:
                e["status"] = "n/a"
                e["reason"] = _distinct(r.reason for r in mine)
            elif not run.settings.get("peers", True):
                e["status"], e["reason"] = "not run", "peers switched off (--no-peers)"
            else:
                have, what = _importable(pkg)
                e["status"] = "n/a"
                if devs is not ANY and peer_device not in devs:
                    here = DEVICE_WORDS.get(peer_device, peer_device or "no device")
                    e["reason"] = (f"runs on {_device_words(devs)}; this run "
                                   f"timed peers on {here}" + ("" if have else f"; {what}"))
                else:
                    e["reason"] = "no config of this run reached it (every config over the CPU limit?)"
            entries.append(e)
        out[op] = entries
    return out
