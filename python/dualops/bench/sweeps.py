"""Named benchmark sweeps (``python -m dualops bench --sweep NAME``, ``--list``) and custom shapes
(``--op OP --shape key=value,...``).

A sweep is one op and a list of shapes (dicts of that op's bench keys; missing keys take the
op module's defaults). Model shapes come from the public model configs: Llama-3.1 8B/70B/405B
(32/8, 64/8, 128/8 heads, head dim 128), Qwen2.5-7B (28/4), Qwen2.5-14B (40/8), Qwen3-32B
(64/8), Qwen3-235B-A22B (64/4), DeepSeek-V3 MoE (hidden 7168, expert intermediate 2048, 256
experts, top-8), Qwen3-235B-A22B MoE (hidden 4096, expert intermediate 1536, 128 experts) and
Qwen3-30B-A3B MoE (hidden 2048, expert intermediate 768); FlashMLA's benchmark configurations
for MLA.
"""
from __future__ import annotations

from dataclasses import dataclass, field

KIB = 1024
# Largest KV cache an IFA config may need (keeps every config inside an 80 GB H100 with room
# for the rotated copies and the SDPA peer's own layout).
_IFA_KV_LIMIT = 16 * 2 ** 30


@dataclass(frozen=True)
class Sweep:
    name: str
    op: str
    description: str
    shapes: tuple = ()
    # Used instead of ``shapes`` when no accelerator backend runs (reference / simulator only).
    cpu_shapes: tuple | None = None
    x_key: str | None = None          # the key plotted on the x axis
    tags: tuple = field(default_factory=tuple)

    def for_machine(self, accelerated: bool) -> tuple:
        return self.shapes if accelerated or self.cpu_shapes is None else self.cpu_shapes


def _ifa_kv_bytes(s):
    esize = 1 if s.get("kv_dtype", "bf16") in ("int8", "fp8") else 2
    return 2 * s["b"] * s["s_kv"] * s["h_kv"] * s.get("d", 128) * esize


def _ifa_grid(heads, batches, contexts, **extra):
    out = []
    for h_q, h_kv in heads:
        for b in batches:
            for s_kv in contexts:
                s = dict(b=b, h_q=h_q, h_kv=h_kv, s_kv=s_kv, **extra)
                if _ifa_kv_bytes(s) <= _IFA_KV_LIMIT:
                    out.append(s)
    return tuple(out)


_K = [1024 * 2 ** i for i in range(8)]  # 1k .. 128k

_SWEEPS = [
    Sweep("quick-ifa", "incre_flash_attention", "smoke bench of IFA (contiguous, paged 64, int8 KV)",
          shapes=(dict(b=16, h_q=32, h_kv=8, s_kv=4096),
                  dict(b=16, h_q=32, h_kv=8, s_kv=4096, layout="paged", block_size=64),
                  dict(b=16, h_q=32, h_kv=8, s_kv=4096, kv_dtype="int8", layout="paged", block_size=128)),
          cpu_shapes=(dict(b=2, h_q=8, h_kv=2, s_kv=256),
                      dict(b=2, h_q=8, h_kv=2, s_kv=256, layout="paged", block_size=64),
                      dict(b=2, h_q=8, h_kv=2, s_kv=256, kv_dtype="int8", layout="paged", block_size=64)),
          tags=("quick",)),
    Sweep("quick-mla", "mla_decode", "smoke bench of MLA decode (bf16 and fp8_v32 caches)",
          shapes=(dict(b=64, h_q=16, s_k=4096), dict(b=64, h_q=16, s_k=4096, kv_format="fp8_v32")),
          cpu_shapes=(dict(b=2, h_q=16, s_k=256), dict(b=2, h_q=16, s_k=256, kv_format="fp8_v32")),
          tags=("quick",)),
    Sweep("quick-gg", "grouped_gemm", "smoke bench of grouped GEMM (bf16, fp8 rowwise)",
          shapes=(dict(g=8, m=512, n=4096, k=7168), dict(g=8, m=512, n=4096, k=7168, recipe="fp8_rowwise")),
          cpu_shapes=(dict(g=4, m=16, n=256, k=256), dict(g=4, m=16, n=256, k=256, recipe="fp8_rowwise")),
          tags=("quick",)),
    # ---------------------------------------------------------------- IFA
    Sweep("ifa-llama", "incre_flash_attention",
          "Llama-3.1 decode: 8B (32/8), 70B (64/8), 70B at TP8 (8/1); contiguous bf16 cache",
          _ifa_grid([(32, 8), (64, 8), (8, 1)], [1, 16, 64], [4096, 32768]), x_key="s_kv"),
    Sweep("ifa-qwen", "incre_flash_attention",
          "Qwen decode: Qwen2.5-7B (28/4), Qwen2.5-14B (40/8), Qwen3-235B-A22B (64/4); paged 128",
          _ifa_grid([(28, 4), (40, 8), (64, 4)], [1, 16, 64], [4096, 32768], layout="paged",
                    block_size=128), x_key="s_kv"),
    Sweep("ifa-context", "incre_flash_attention",
          "GB/s vs context length, Llama-3.1-8B heads (32/8), b 1 and 16, contiguous and paged 64",
          _ifa_grid([(32, 8)], [1, 16], _K) + _ifa_grid([(32, 8)], [1, 16], _K, layout="paged", block_size=64),
          x_key="s_kv"),
    Sweep("ifa-targets", "incre_flash_attention",
          "the targets sweep of BENCHMARKS.md: b 1-128, s_kv 1k-128k, heads 8/1, 32/8, 64/8, 128/128, d 128, contiguous",
          _ifa_grid([(8, 1), (32, 8), (64, 8), (128, 128)], [1, 4, 16, 64, 128], [1024, 4096, 16384, 131072]),
          x_key="s_kv"),
    Sweep("ifa-paged", "incre_flash_attention",
          "paged (page 64 and 128) against contiguous, Llama-3.1-8B heads, b 16",
          tuple(dict(b=16, h_q=32, h_kv=8, s_kv=s, **lay) for s in (4096, 16384, 65536)
                for lay in ({}, dict(layout="paged", block_size=64), dict(layout="paged", block_size=128))),
          x_key="s_kv"),
    Sweep("ifa-quant", "incre_flash_attention",
          "bf16 vs int8 vs fp8 KV cache, Llama-3.1-8B heads, b 16, paged 128",
          tuple(dict(b=16, h_q=32, h_kv=8, s_kv=s, kv_dtype=kv, layout="paged", block_size=128)
                for s in (8192, 32768) for kv in ("bf16", "int8", "fp8")), x_key="s_kv"),
    Sweep("ifa-mtp", "incre_flash_attention", "MTP / speculative decode: causal s_q 2 and 4, b 16, 32/8",
          tuple(dict(b=16, h_q=32, h_kv=8, s_kv=s, s_q=q, causal=True, layout="paged", block_size=64)
                for s in (4096, 32768) for q in (2, 4)), x_key="s_kv"),
    # ---------------------------------------------------------------- MLA
    Sweep("mla-flashmla", "mla_decode",
          "FlashMLA's dense bf16 configs: b 64/128, h_q 16/64/128, s_q 1/2, s_k 4096, page 64",
          tuple(dict(b=b, h_q=h, s_q=q, s_k=4096) for b in (64, 128) for h in (16, 64, 128) for q in (1, 2))),
    Sweep("mla-targets", "mla_decode",
          "the dense decode target rows: compute-bound b128 h_q128 (s_q 1/2, s_k 4096/8192), b32 s_k16384; "
          "memory-bound b64 h_q16 s_k4096; h_q 32/64; FP8 caches; page sizes 16-256",
          (dict(b=128, h_q=128, s_k=4096), dict(b=128, h_q=128, s_q=2, s_k=4096),
           dict(b=128, h_q=128, s_k=8192), dict(b=32, h_q=128, s_k=16384),
           dict(b=64, h_q=16, s_k=4096), dict(b=64, h_q=32, s_k=4096), dict(b=64, h_q=64, s_k=4096),
           dict(b=64, h_q=16, s_k=4096, kv_format="fp8_v32"), dict(b=64, h_q=16, s_k=4096, kv_format="fp8_model1"),
           dict(b=128, h_q=128, s_k=4096, kv_format="fp8_v32"),
           dict(b=128, h_q=128, s_k=4096, kv_format="fp8_model1"))
          + tuple(dict(b=64, h_q=16, s_k=4096, page=p) for p in (16, 32, 128, 256))
          + (dict(b=128, h_q=128, s_k=4096, varlen=True), dict(b=64, h_q=16, s_k=4096, varlen=True))),
    Sweep("mla-context", "mla_decode", "GB/s vs context length, b 64, h_q 16 (memory-bound)",
          tuple(dict(b=64, h_q=16, s_k=s) for s in _K[:6]), x_key="s_k"),
    Sweep("mla-fp8", "mla_decode",
          "FP8 caches: fp8_v32 / fp8_model1 dense and FlashMLA's sparse config (b 128, h_q 128, s_q 2, topk 2048)",
          (dict(b=128, h_q=128, s_k=4096, kv_format="fp8_v32"),
           dict(b=128, h_q=128, s_q=2, s_k=4096, kv_format="fp8_v32"),
           dict(b=128, h_q=64, s_k=4096, d_qk=512, kv_format="fp8_model1"),
           dict(b=128, h_q=128, s_q=2, s_k=8192, topk=2048, kv_format="fp8_v32"),
           dict(b=128, h_q=128, s_q=2, s_k=8192, topk=2048))),
    Sweep("mla-sparse", "mla_decode",
          "sparse decode, topk 2048 of 8192 cached tokens per request (each query token's keys drawn "
          "at random from its request's context): h_q 128 (FP8 and bf16 caches), h_q 64 / 16, and "
          "FlashMLA's config b 128 s_q 2",
          (dict(b=64, h_q=128, s_k=8192, topk=2048, kv_format="fp8_v32"),
           dict(b=64, h_q=64, s_k=8192, topk=2048, d_qk=512, kv_format="fp8_model1"),
           dict(b=64, h_q=128, s_k=8192, topk=2048),
           dict(b=64, h_q=16, s_k=8192, topk=2048, kv_format="fp8_v32"),
           dict(b=64, h_q=16, s_q=2, s_k=8192, topk=2048, kv_format="fp8_v32"),
           dict(b=128, h_q=128, s_q=2, s_k=8192, topk=2048, kv_format="fp8_v32"))),
    # ---------------------------------------------------------------- grouped GEMM
    Sweep("gg-deepseek-v3", "grouped_gemm",
          "DeepSeek-V3 MoE: gate_up (N 4096, K 7168) and down (N 7168, K 2048), 32 local experts (EP8), "
          "tokens per expert 8-512, bf16 and fp8 blockwise; plus G 8 x 512 and G 256 x 16",
          tuple(dict(g=32, m=m, n=n, k=k, recipe=r) for (n, k) in ((4096, 7168), (7168, 2048))
                for r in ("bf16", "fp8_blockwise") for m in (8, 16, 32, 64, 128, 256, 512))
          + (dict(g=8, m=512, n=4096, k=7168), dict(g=8, m=512, n=4096, k=7168, recipe="fp8_rowwise"),
             dict(g=256, m=16, n=4096, k=7168, recipe="fp8_rowwise")), x_key="m"),
    Sweep("gg-qwen3", "grouped_gemm",
          "Qwen3 MoE: 235B-A22B gate_up (N 3072, K 4096) / down (N 4096, K 1536) and 30B-A3B "
          "(N 1536, K 2048), 16 local experts, tokens per expert 16-512, bf16 and fp8 rowwise",
          tuple(dict(g=16, m=m, n=n, k=k, recipe=r) for (n, k) in ((3072, 4096), (4096, 1536), (1536, 2048))
                for r in ("bf16", "fp8_rowwise") for m in (16, 64, 256, 512)), x_key="m"),
    Sweep("gg-targets", "grouped_gemm",
          "the grouped-GEMM targets: DeepSeek-V3 gate_up (N 4096, K 7168) and down (N 7168, K 2048), "
          "G 8-256, tokens per group 4-4096, bf16 vs torch._grouped_mm and fp8 rowwise vs "
          "torch._scaled_grouped_mm; blockwise at G8 x 4096",
          tuple(dict(g=g, m=m, n=n, k=k, recipe=r) for (n, k) in ((4096, 7168), (7168, 2048))
                for r in ("bf16", "fp8_rowwise")
                for (g, m) in ((8, 4096), (8, 512), (32, 128), (64, 64), (256, 16), (256, 4)))
          + (dict(g=8, m=4096, n=4096, k=7168, recipe="fp8_blockwise"),), x_key="m"),
    Sweep("gg-masked", "grouped_gemm",
          "masked layout (CUDA-graph friendly MoE): DeepGEMM-style 4 x 256 and 32 x 64, N 4096, K 7168",
          (dict(g=4, m=256, n=4096, k=7168, layout="masked", recipe="fp8_blockwise"),
           dict(g=4, m=256, n=4096, k=7168, layout="masked"),
           dict(g=32, m=64, n=4096, k=7168, layout="masked", recipe="fp8_blockwise")), x_key="m"),
]

SWEEPS: dict[str, Sweep] = {s.name: s for s in _SWEEPS}
GROUPS: dict[str, tuple[str, ...]] = {
    "quick": ("quick-ifa", "quick-mla", "quick-gg"),
    "ifa": tuple(s.name for s in _SWEEPS if s.op == "incre_flash_attention" and "quick" not in s.tags),
    "mla": tuple(s.name for s in _SWEEPS if s.op == "mla_decode" and "quick" not in s.tags),
    "gg": tuple(s.name for s in _SWEEPS if s.op == "grouped_gemm" and "quick" not in s.tags),
}


def resolve(names) -> list[Sweep]:
    """Sweep objects for names of sweeps or groups (``quick``, ``ifa``, ``mla``, ``gg``)."""
    out: list[Sweep] = []
    for n in names:
        if n in GROUPS:
            out += [SWEEPS[m] for m in GROUPS[n]]
        elif n in SWEEPS:
            out.append(SWEEPS[n])
        else:
            raise ValueError(f"--sweep: unknown sweep {n!r}; known: {', '.join(list(GROUPS) + list(SWEEPS))}")
    seen, unique = set(), []
    for s in out:
        if s.name not in seen:
            seen.add(s.name)
            unique.append(s)
    return unique


def parse_shape(text: str) -> dict:
    """``"b=4,s_kv=8192,layout=paged"`` -> {"b": 4, "s_kv": 8192, "layout": "paged"}."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise ValueError(f"--shape: expected key=value pairs separated by commas, got {part!r} in {text!r}")
        k, v = (x.strip() for x in part.split("=", 1))
        if v.lower() in ("true", "false"):
            out[k] = v.lower() == "true"
        else:
            try:
                out[k] = int(v)
            except ValueError:
                out[k] = v
    return out


def custom(op: str, shapes: list[str]) -> Sweep:
    return Sweep("custom", op, "custom shapes from --shape", tuple(parse_shape(s) for s in shapes))


def listing() -> str:
    lines = ["sweep groups:"]
    lines += [f"  {g:<16} {', '.join(m)}" for g, m in GROUPS.items()]
    lines.append("sweeps:")
    for s in _SWEEPS:
        n = len(s.shapes)
        cpu = f", {len(s.cpu_shapes)} on CPU-only machines" if s.cpu_shapes is not None else ""
        lines.append(f"  {s.name:<16} {s.op:<22} {n:>3} configs{cpu}: {s.description}")
    return "\n".join(lines)
