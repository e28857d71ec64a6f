"""dualops.parity: the case matrix, the input builders (the docs/parity.md method), the runner's
rows (pass / fail / error / n/a, backend pairs) and the saved-set round trip."""
import importlib
import math

import pytest
import torch

import dualops
from dualops import quant, reference, schema
from dualops.parity import builders, cases, cross_format, expected, report, runner, store

REF_BACKEND = importlib.import_module("dualops.backends.reference")


def _build(case, seed=7):
    return case.inputs(seed)


# ----------------------------------------------------------------------------- builders


def test_page_permutes_blocks_and_poisons_unused_slots():
    g = torch.Generator().manual_seed(0)
    B, S, bs = 3, 40, 16
    k = torch.randn(B, S, 2, 8)
    lens = [0, 1, 40]
    (pool,), table = builders.page([k], lens, bs, g)
    assert table.dtype == torch.int32 and table.shape == (B, 3)
    used = [int(table[b, j]) for b in range(B) for j in range(-(-lens[b] // bs))]
    assert len(set(used)) == len(used), "a block is shared by two requests"
    assert used != sorted(used), "block ids are not permuted"
    for b in range(B):
        for t in range(S):
            slot = pool[int(table[b, t // bs]), t % bs]
            if t < lens[b]:
                assert torch.equal(slot, k[b, t])
            else:
                assert torch.isnan(slot).all(), f"request {b} position {t} is not poisoned"
    # every slot of every block not holding a valid token is poison
    valid = sum(lens)
    assert int((~torch.isnan(pool[..., 0, 0])).sum()) == valid


def test_strided_view_keeps_values_and_hides_poison():
    t = torch.randn(2, 3, 4, 16, dtype=torch.bfloat16)
    v = builders.strided_view(t)
    assert torch.equal(v, t) and not v.is_contiguous() and v.stride(-1) == 1
    assert torch.isnan(v.as_strided((2, 3, 4, 32), v.stride())[..., 16:].float()).all()


def test_generator_is_per_case_and_reproducible():
    a = builders.generator(3, "grouped_gemm", "x")
    b = builders.generator(3, "grouped_gemm", "x")
    c = builders.generator(3, "grouped_gemm", "y")
    ra, rb, rc = (torch.randn(4, generator=g) for g in (a, b, c))
    assert torch.equal(ra, rb) and not torch.equal(ra, rc)


# ----------------------------------------------------------------------------- the matrix


def test_case_names_are_unique_and_quick_is_a_subset():
    names = [c.name for op in cases.OPS for c in cases.cases(op, full=True)]
    assert len(names) == len(set(names))
    for op in cases.OPS:
        quick = cases.cases(op)
        assert quick and len(quick) < len(cases.cases(op, full=True))
        assert all(c.quick for c in quick)


def test_matrix_covers_the_variants():
    feats = {op: [schema.validate(op, _build(c)).features for c in cases.cases(op, full=True)]
             for op in cases.OPS}
    ifa = feats["incre_flash_attention"]
    assert {f["kv_dtype"] for f in ifa} >= {"bfloat16", "float16", "int8", "float8_e4m3fn"}
    assert {f["layout"] for f in ifa} == {"contiguous", "paged"}
    assert {f["head_dim"] for f in ifa} == {64, 128, 256}
    assert any(f["causal"] and f["s_q"] > 1 for f in ifa)
    assert any(f["atten_mask"] for f in ifa) and any(f["pse_shift"] for f in ifa)
    assert any(f["group"] == 1 for f in ifa) and any(f["group"] >= 8 for f in ifa)
    mla = feats["mla_decode"]
    assert {f["kv_format"] for f in mla} == {"bf16", "fp8_v32", "fp8_model1", "int8_v32"}
    assert any(f["sparse"] for f in mla) and any(f["extra_kv"] for f in mla) and any(f["attn_sink"] for f in mla)
    assert any(f["causal"] for f in mla) and any(f["h_q"] % 2 for f in mla)
    gg = feats["grouped_gemm"]
    assert {(f["scale_mode"], f["layout"]) for f in gg} >= {
        ("none", "contiguous"), ("none", "masked"), ("per_tensor", "contiguous"), ("rowwise", "contiguous"),
        ("blockwise", "contiguous"), ("blockwise", "masked"), ("rowwise", "masked")}
    assert {f["dtype"] for f in gg} >= {"bfloat16", "float16", "float8_e4m3fn", "int8"}


def test_cases_poison_what_must_not_be_read():
    c = cases.cases("incre_flash_attention", names=["contig_gqa4_d128_bf16"])[0]
    a = _build(c)
    assert a["kv_lens"].tolist() == [0, 1, 37]
    assert torch.isnan(a["k_cache"][2, 37:].float()).all() and torch.isnan(a["v_cache"][0].float()).all()
    assert c.strided == ("q",)
    sparse = _build(cases.cases("mla_decode", names=["sparse_bf16_topk64_sink"])[0])
    idx = sparse["indices"]
    cap = sparse["kv_cache"].shape[0] * sparse["kv_cache"].shape[1]
    for bad in (-1, -2 ** 31, cap, 2 ** 31 - 1):
        assert bool((idx == bad).any()), f"no invalid index {bad}"
    sink = sparse["attn_sink"]
    assert math.isinf(sink[0]) and sink[0] > 0 and math.isinf(sink[-1]) and sink[-1] < 0
    gg = _build(cases.cases("grouped_gemm", names=["contig_fp8_rowwise_g4"])[0])
    tail = gg["x"][int(gg["group_offsets"][-1]):].float()
    assert tail.shape[0] == 3 and torch.isnan(tail).all()


@pytest.mark.parametrize("name", ["paged16_int8_gqa4_d128", "contig_fp8_gqa2_d128_fp16",
                                  "dense_fp8_v32_h16", "dense_fp8_model1_h16", "sparse_fp8_v32_extra",
                                  "dense_int8_v32_h16", "sparse_int8_v32_extra",
                                  "contig_fp8_per_tensor_g4", "contig_int8_rowwise_g3",
                                  "contig_fp8_blockwise_g3", "masked_fp8_blockwise_g2"])
def test_dequantized_expected_matches_the_reference_own_dequant(name):
    """Two independent dequantizations (parity's and the reference's) give the same answer."""
    case = cases.find(name)
    a = _build(case)
    deq = expected.dequantized(case.op, a)
    for k, v in deq.items():
        if isinstance(v, torch.Tensor) and v.is_floating_point() and k not in ("attn_sink", "pse_shift"):
            assert v.dtype in (torch.float32, torch.bfloat16, torch.float16), f"{k} still quantized"
    mine = expected.expected(case.op, a)
    fn = getattr(reference, case.op)
    theirs = fn(**a)
    theirs = {"y": theirs} if case.op == "grouped_gemm" else dict(zip(("out", "lse"), theirs))
    for n, t in mine.items():
        torch.testing.assert_close(t, theirs[n].float(), rtol=1e-4, atol=1e-4, equal_nan=True)


def test_format_pairs_hold_one_cache():
    """The fp8_v32 case, its int8_v32 twin and the bf16-cache call draw the same values."""
    for fp8, int8, bf16 in cases.FORMAT_PAIRS.values():
        a, b, c = (_build(x) for x in (fp8, int8, bf16))
        assert a["kv_format"] == "fp8_v32"
        assert b["kv_format"] == "int8_v32" and c["kv_format"] == "bf16"
        for k in ("q", "block_table", "cache_seqlens", "indices", "attn_sink"):
            if k in a:
                assert torch.equal(a[k], b[k]) and torch.equal(a[k], c[k]), k
        for pool in ("kv_cache", "extra_kv_cache"):
            if pool not in a:
                continue
            logical = c[pool].float()
            live = ~torch.isnan(logical[..., 0, 0])
            assert bool(live.any()) and not bool(live.all())
            for x, fmt, bound in ((a, "fp8_v32", 0.05), (b, "int8_v32", 0.01)):
                back = quant.unpack_mla_kv(x[pool], fmt, torch.float32)
                assert bool(back[~live].isnan().all()), "poisoned slots stay poison"
                rel = float((back[live] - logical[live]).norm() / logical[live].norm())
                assert 0 < rel < bound, (fmt, rel)


def test_cross_format_diff_rule():
    a = torch.tensor([1.0, 2.0, float("nan"), 4.0])
    b = torch.tensor([1.0, 3.0, 5.0, 4.0])
    scale = torch.tensor([2.0, 2.0, 2.0, float("inf")])
    d = cross_format.diff(a, b, scale)
    assert d["compared"] == 2 and d["max_abs"] == 1.0 and d["rel_rms"] == pytest.approx(math.sqrt(0.5) / 2)
    assert math.isnan(cross_format.diff(a[2:3], b[2:3], scale[2:3])["rel_rms"])


def test_cross_format_error_is_measured_and_reported():
    fp8, int8, _ = cases.FORMAT_PAIRS["dense_fp8_v32_h16"]
    run = runner.run(ops=["mla_decode"], backends=["reference"], seed=5, case_names=[fp8.name, int8.name])
    assert run.summary()["pass"] == 2 and not run.failures
    rows = run.cross_format
    assert [(r["pair"], r["backend"]) for r in rows] == [(fp8.name, "expected"), (fp8.name, "reference")]
    for r in rows:
        assert r["int8_case"] == int8.name and r["int8_vs_fp8"]["compared"] == 2 * 16 * 512
        assert 0 < r["int8_vs_cache"]["rel_rms"] < r["fp8_vs_cache"]["rel_rms"] < 0.05
        assert 0 < r["int8_vs_fp8"]["rel_rms"] < 0.05 and r["int8_vs_fp8"]["max_abs"] > 0
        assert r["lse_max_abs"] > 0
    text = report.terminal(run)
    assert "mla_decode cross-format" in text and "dense_v32_h16" in text and "expected" in text
    assert "## mla_decode: fp8_v32 against int8_v32" in report.markdown(run)
    assert report.to_json(run)["cross_format"] == rows
    # only one side of a pair selected: no cross-format rows
    assert runner.run(ops=["mla_decode"], backends=["reference"], seed=5, case_names=[int8.name]).cross_format == []


def test_dequant_of_ifa_int8_is_scale_times_value_plus_offset():
    x = torch.randn(2, 5, 2, 16)
    q, s, o = quant.quantize_kv_int8(x)
    a = dict(q=torch.randn(2, 1, 2, 16), k_cache=q, v_cache=q, k_scale=s, v_scale=s, k_offset=o)
    d = expected.dequantized("incre_flash_attention", a)
    torch.testing.assert_close(d["k_cache"], (q.float() + o) * s)
    torch.testing.assert_close(d["v_cache"], q.float() * s)
    assert "k_scale" not in d and "k_offset" not in d


# ----------------------------------------------------------------------------- the runner


def test_quick_reference_run_passes_every_case():
    run = runner.run(backends=["reference"], seed=11)
    assert run.failures == []
    assert len(run.results) == sum(len(cases.cases(op)) for op in cases.OPS)
    assert all(r.status == "pass" and r.against == "reference" for r in run.results)
    ifa = [r for r in run.results if r.op == "incre_flash_attention"]
    assert all(set(r.outputs) == {"out", "lse"} for r in ifa)


def test_planted_wrong_lse_fails_with_repro(monkeypatch):
    orig = REF_BACKEND.incre_flash_attention

    def wrong_lse(*a, **kw):
        out, lse = orig(*a, **kw)
        return out, lse + 1e-3  # out is right: only the tight lse budget catches it
    monkeypatch.setattr(REF_BACKEND, "incre_flash_attention", wrong_lse)
    run = runner.run(ops=["incre_flash_attention"], backends=["reference"], seed=2,
                     case_names=["paged16_gqa4_d128_bf16"])
    (r,) = run.results
    assert r.status == "fail" and r.outputs["out"]["ok"] and not r.outputs["lse"]["ok"]
    assert "lse" in r.reason
    assert r.repro == ("python -m dualops parity --op incre_flash_attention --case paged16_gqa4_d128_bf16 "
                       "--backend reference --seed 2")


def test_backend_exception_is_an_error_row(monkeypatch):
    def boom(*a, **kw):
        raise RuntimeError("kernel exploded\nsecond line")
    monkeypatch.setattr(REF_BACKEND, "grouped_gemm", boom)
    run = runner.run(ops=["grouped_gemm"], backends=["reference"], seed=0, case_names=["masked_bf16_g3"])
    (r,) = run.results
    assert r.status == "error" and r.failed and r.reason == "RuntimeError: kernel exploded"


def test_unsupported_variant_is_na_not_pass(monkeypatch):
    real = schema.support_reason

    def no_masked(op, backend, **f):
        if op == "grouped_gemm" and f.get("layout") == "masked":
            return "grouped_gemm on backend 'reference' does not support layout='masked'"
        return real(op, backend, **f)
    monkeypatch.setattr(runner.schema, "support_reason", no_masked)
    run = runner.run(ops=["grouped_gemm"], backends=["reference"], seed=0)
    na = [r for r in run.results if r.status == "n/a"]
    assert {r.case for r in na} == {"masked_bf16_g3", "masked_fp8_blockwise_g2"}
    assert all("layout='masked'" in r.reason and not r.failed for r in na)
    assert run.summary()["pass"] == len(run.results) - 2 and not run.failures


def test_pairs_of_kernel_backends_are_compared(monkeypatch):
    """Two stand-in kernel backends: 'cuda' right, 'npu' off by 3%: both are checked against the
    reference, and against each other."""
    def fake_run(op, inputs, strided, backend):
        outs = expected.call(op, runner.on_device(inputs, "cpu", strided), "reference")
        if backend == "npu":
            outs = {k: v * 1.03 if k != "lse" else v for k, v in outs.items()}
        return outs, 0.0
    monkeypatch.setattr(runner, "_run_backend", fake_run)
    monkeypatch.setattr(runner.schema, "support_reason", lambda *a, **k: None)
    case = cases.find("contig_bf16_g4_empty")
    rows, outs = runner.check_case(case.op, case.name, _build(case), case.strided, ["cuda", "npu"], seed=4)
    by = {(r.backend, r.against): r for r in rows}
    assert set(by) == {("cuda", "reference"), ("npu", "reference"), ("cuda", "npu")}
    assert by[("cuda", "reference")].status == "pass"
    assert by[("npu", "reference")].status == "fail"
    assert by[("cuda", "npu")].status == "fail"
    assert by[("cuda", "npu")].repro.endswith("--backend cuda,npu --seed 4")


def test_noncontiguous_inputs_reach_the_backend(monkeypatch):
    seen = {}
    orig = REF_BACKEND.incre_flash_attention

    def spy(q, *a, **kw):
        seen["contiguous"] = q.is_contiguous()
        return orig(q, *a, **kw)
    monkeypatch.setattr(REF_BACKEND, "incre_flash_attention", spy)
    run = runner.run(ops=["incre_flash_attention"], backends=["reference"], seed=0,
                     case_names=["contig_gqa4_d128_bf16"])
    assert seen["contiguous"] is False and not run.failures


def test_unknown_case_and_unavailable_backend_are_refused():
    with pytest.raises(ValueError, match="unknown case"):
        runner.run(backends=["reference"], case_names=["no_such_case"])
    unavailable = [b for b, s in dualops.backends().items() if not s["available"]]
    if unavailable:
        with pytest.raises(RuntimeError, match="not available here"):
            runner.select_backends([unavailable[0]])
    with pytest.raises(ValueError, match="--backend"):
        runner.select_backends(["tpu"])


def test_saved_set_round_trip(tmp_path, monkeypatch):
    runner.run(ops=["grouped_gemm"], backends=["reference"], seed=5, save_dir=tmp_path,
               case_names=["contig_bf16_g4_empty", "contig_fp8_blockwise_g3"])
    manifest = store.load_manifest(tmp_path)
    assert manifest["seed"] == 5 and [e["case"] for e in manifest["cases"]] == [
        "contig_bf16_g4_empty", "contig_fp8_blockwise_g3"]
    data = store.load_case(tmp_path, manifest["cases"][0])
    assert data["strided"] == ["x"] and data["inputs"]["x"].is_contiguous()
    assert set(data["outputs"]) == {"reference"}
    again = runner.run_against(tmp_path, backends=["reference"])
    assert not again.failures
    assert {r.against for r in again.results} == {"reference", "saved:reference"}
    # this machine's backend now disagrees with what was saved: both comparisons fail
    orig = REF_BACKEND.grouped_gemm
    monkeypatch.setattr(REF_BACKEND, "grouped_gemm", lambda *a, **kw: orig(*a, **kw) * 1.05)
    bad = runner.run_against(tmp_path, backends=["reference"], case_names=["contig_fp8_blockwise_g3"])
    assert {r.against for r in bad.failures} == {"reference", "saved:reference"}
    assert all(f"--against {tmp_path}" in r.repro for r in bad.failures)


def test_against_rejects_a_directory_without_a_set(tmp_path):
    with pytest.raises(FileNotFoundError, match="parity --save"):
        store.load_manifest(tmp_path)
