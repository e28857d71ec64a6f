"""Public API contract: custom ops, torch.compile, dispatch and the capability matrix."""
import importlib

import pytest
import torch

import dualops
from dualops import schema

backends_pkg = importlib.import_module("dualops.backends")


def test_backends_is_both_callable_and_the_package():
    import dualops.backends.reference as ref_mod

    assert dualops.backends is backends_pkg
    assert ref_mod.NAME == "reference"
    assert dualops.backends()["reference"]["available"] is True

bf16 = torch.bfloat16


def _ifa_args():
    q = torch.randn(2, 2, 4, 64, dtype=bf16)
    k = torch.randn(2, 40, 2, 64, dtype=bf16)
    return q, k, torch.randn_like(k), torch.tensor([40, 7], dtype=torch.int32)


def test_ops_are_registered_custom_ops():
    for name in ("incre_flash_attention", "mla_decode", "grouped_gemm"):
        assert hasattr(torch.ops.dualops, name)


def test_ifa_cpu_dispatches_to_reference_and_matches_it():
    q, k, v, lens = _ifa_args()
    out, lse = dualops.incre_flash_attention(q, k, v, kv_lens=lens, causal=True, return_lse=True)
    ref_out, ref_lse = dualops.reference.incre_flash_attention(q, k, v, kv_lens=lens, causal=True)
    assert torch.equal(out, ref_out.to(bf16))
    assert torch.equal(lse, ref_lse)


def _with_prepare_step(monkeypatch, prepare):
    """The reference backend's IFA given the prepare step `prepare` (as CUDA's IfaLaunch), with an
    empty prepared-launch cache."""
    from dualops import ops

    ref = importlib.import_module("dualops.backends.reference")
    real = backends_pkg.implementation
    monkeypatch.setattr(ops.backends, "implementation",
                        lambda name, op: (ref.incre_flash_attention, prepare) if name == "reference" else real(name, op))
    monkeypatch.setattr(ops, "_PREPARED", {})


def test_prepared_launch_is_reused_per_signature_only(monkeypatch):
    """A backend with a prepare step (CUDA: IfaLaunch) is prepared once per call signature and
    backend: later calls with new data of the same shapes, dtypes, strides and scalars reuse it
    (with that call's tensors and the defaults the first call filled); any change of those, or
    validate="full", goes through validation again."""
    ref = importlib.import_module("dualops.backends.reference")
    made = []

    def prepare(q, k_cache, v_cache, *, plan, softmax_scale, causal, **kw0):
        made.append((tuple(q.stride()), softmax_scale, causal))

        def launch(q, k_cache, v_cache, plan=None, **kw):
            kw.update(softmax_scale=softmax_scale, causal=causal)  # what the prepared launch holds
            return ref.incre_flash_attention(q, k_cache, v_cache, plan=None, **kw)
        return launch

    _with_prepare_step(monkeypatch, prepare)

    def check(q, k, v, lens, **kw):
        out = dualops.incre_flash_attention(q, k, v, kv_lens=lens, **kw)
        want, _ = dualops.reference.incre_flash_attention(q, k, v, kv_lens=lens, **kw)
        assert torch.equal(out, want.to(bf16))

    q, k, v, lens = _ifa_args()
    check(q, k, v, lens, causal=True)
    for _ in range(2):  # fresh data, same signature: no new prepare
        q2, k2, v2, _lens = _ifa_args()
        check(q2, k2, v2, torch.tensor([3, 40], dtype=torch.int32), causal=True)
    assert made == [(tuple(q.stride()), 64 ** -0.5, True)]
    check(q, k, v, lens, causal=False)  # another scalar
    check(q, k, v, lens, causal=True, softmax_scale=0.5)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # same shape, other strides
    check(qt, k, v, lens, causal=True)
    assert len(made) == 4 and made[-1][0] == tuple(qt.stride())
    dualops.incre_flash_attention(q, k, v, kv_lens=lens, causal=True, validate="full")
    assert len(made) == 5  # full validation reads values: never served from the cache
    with pytest.raises(TypeError, match="q dtype"):  # new signature: validated, with its error
        dualops.incre_flash_attention(q.float(), k, v, kv_lens=lens, causal=True)


def test_refused_launch_keeps_no_prepared_launch(monkeypatch):
    """A call whose launch refuses its tensors (CUDA: a cache off a 16-byte boundary, checked by
    the host code on every launch) leaves nothing in the prepared-launch cache; the next good call
    of the signature prepares and keeps it."""
    from dualops import ops

    ref = importlib.import_module("dualops.backends.reference")
    refuse = [True]

    def prepare(q, k_cache, v_cache, *, plan, **kw0):
        def launch(q, k_cache, v_cache, plan=None, **kw):
            if refuse[0]:
                raise ValueError("k and v caches must start on a 16-byte boundary")
            return ref.incre_flash_attention(q, k_cache, v_cache, plan=None, **kw)
        return launch

    _with_prepare_step(monkeypatch, prepare)
    q, k, v, lens = _ifa_args()
    with pytest.raises(ValueError, match="16-byte boundary"):
        dualops.incre_flash_attention(q, k, v, kv_lens=lens)
    assert ops._PREPARED == {}
    refuse[0] = False
    dualops.incre_flash_attention(q, k, v, kv_lens=lens)
    assert len(ops._PREPARED) == 1


def test_default_softmax_scale_is_d_to_minus_half():
    q, k, v, lens = _ifa_args()
    a = dualops.incre_flash_attention(q, k, v, kv_lens=lens)
    b = dualops.incre_flash_attention(q, k, v, kv_lens=lens, softmax_scale=64 ** -0.5)
    assert torch.equal(a, b)


def test_torch_compile_fullgraph_each_op():
    q, k, v, lens = _ifa_args()

    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(q, k, v, lens, x, w, offs, mq, kv, bt, sl):
        a = dualops.incre_flash_attention(q, k, v, kv_lens=lens)
        y = dualops.grouped_gemm(x, w, group_offsets=offs)
        o, lse = dualops.mla_decode(mq, kv, bt, sl)
        return a, y, o, lse

    x = torch.randn(6, 32, dtype=bf16)
    w = torch.randn(2, 16, 32, dtype=bf16)
    offs = torch.tensor([0, 2, 6], dtype=torch.int32)
    mq = torch.randn(1, 1, 4, 576, dtype=bf16)
    kv = torch.randn(4, 16, 1, 576, dtype=bf16)
    bt = torch.arange(4, dtype=torch.int32).reshape(1, 4)
    sl = torch.tensor([50], dtype=torch.int32)
    a, y, o, lse = step(q, k, v, lens, x, w, offs, mq, kv, bt, sl)
    assert torch.equal(a, dualops.incre_flash_attention(q, k, v, kv_lens=lens))
    assert torch.equal(y, dualops.grouped_gemm(x, w, group_offsets=offs))
    o2, lse2 = dualops.mla_decode(mq, kv, bt, sl)
    assert torch.equal(o, o2) and torch.equal(lse, lse2)


def test_fake_impl_validates_under_compile():
    q, k, v, lens = _ifa_args()

    @torch.compile(fullgraph=True, backend="aot_eager")
    def bad(q, k, v):
        return dualops.incre_flash_attention(q, k, v[:, :, :1])

    with pytest.raises(Exception, match="v_cache.shape"):
        bad(q, k, v)


def test_backends_lists_every_backend_with_reason():
    b = dualops.backends()
    assert set(b) == set(backends_pkg.NAMES)
    assert b["reference"]["available"] is True
    for name, info in b.items():
        assert isinstance(info["reason"], str) and info["reason"]
    assert b["npu"]["available"] is False  # never on a CPU machine


def test_unavailable_backend_error_says_why():
    q, k, v, lens = _ifa_args()
    ok, why = backends_pkg.status("npu")
    assert not ok
    with pytest.raises(ValueError, match="backend 'npu' needs tensors on npu"):
        dualops.incre_flash_attention(q, k, v, backend="npu")


def test_unsupported_variant_is_not_implemented_error(monkeypatch):
    # The schema's capability matrix gates dispatch: the Ascend MLA kernel takes h_q <= 128.
    q = torch.randn(1, 1, 256, 576, dtype=bf16)
    kv = torch.randn(4, 16, 1, 576, dtype=bf16)
    bt = torch.arange(4, dtype=torch.int32).reshape(1, 4)
    sl = torch.tensor([50], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="h_q=256"):
        dualops.mla_decode(q, kv, bt, sl, backend="ascend_sim")
    q, k, v, lens = _ifa_args()
    qd = torch.randn(2, 2, 4, 96, dtype=bf16)
    kd = torch.randn(2, 40, 2, 96, dtype=bf16)
    with pytest.raises(NotImplementedError, match="head_dim=96"):
        dualops.incre_flash_attention(qd, kd, kd, backend="ascend_sim")


def test_supports_reads_the_capability_matrix():
    assert dualops.supports("incre_flash_attention", "reference", kv_dtype="int8", head_dim=96)
    assert dualops.supports("incre_flash_attention", "cuda", head_dim=128, s_q=4, block_size=64)
    assert not dualops.supports("incre_flash_attention", "cuda", head_dim=96)
    assert not dualops.supports("incre_flash_attention", "cuda", s_q=9)
    assert not dualops.supports("incre_flash_attention", "cuda", block_size=24)
    assert dualops.supports("incre_flash_attention", "npu", head_dim=128)
    assert not dualops.supports("incre_flash_attention", "npu", head_dim=96)
    assert dualops.supports("grouped_gemm", "cuda", scale_mode="blockwise", layout="masked")
    assert dualops.supports("grouped_gemm", "npu", scale_mode="rowwise")
    with pytest.raises(ValueError, match="unknown feature"):
        dualops.supports("incre_flash_attention", "cuda", colour="red")
    with pytest.raises(ValueError, match="backend must be one of"):
        dualops.supports("incre_flash_attention", "tpu")


def test_every_schema_loads_and_is_self_consistent():
    for op in schema.OPS:
        s = schema.load(op)
        names = [a.name for a in s.args]
        assert len(names) == len(set(names))
        for a in s.args:
            assert a.kind in ("tensor", "float", "int", "bool", "str", "dtype", "object"), (op, a.name)
            assert a.raw.get("doc"), f"{op}.{a.name} has no doc"
        assert "reference" in s.capabilities
        for backend, caps in s.capabilities.items():
            assert backend in backends_pkg.NAMES
            assert set(caps) <= set(s.raw["features"]), (op, backend)
        assert schema.params_size(op) % 8 == 0


def test_pack_params_layout():
    lay = schema.params_layout("incre_flash_attention")
    offs = {n: o for n, _, o in lay}
    assert offs["q"] == 0 and offs["k"] == 8
    blob = schema.pack_params("incre_flash_attention", q=0x1234, softmax_scale=0.5, causal=1)
    import struct
    assert struct.unpack_from("<Q", blob, 0)[0] == 0x1234
    assert struct.unpack_from("<f", blob, offs["softmax_scale"])[0] == 0.5
    assert struct.unpack_from("<i", blob, offs["causal"])[0] == 1
    with pytest.raises(ValueError, match="unknown field"):
        schema.pack_params("incre_flash_attention", nope=1)
