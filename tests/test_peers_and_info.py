"""Bench peers (detected at run time, n/a with a reason when absent or failing, never a crash),
the plots, and `python -m dualops info --op ... --shape ...`."""
import importlib.util

import pytest
import torch

from dualops import cli
from dualops.bench import peers, workloads

SHAPES = {"incre_flash_attention": dict(b=2, h_q=8, h_kv=2, s_kv=64),
          "mla_decode": dict(b=2, h_q=16, s_k=64),
          "grouped_gemm": dict(g=2, m=4, n=32, k=64)}


@pytest.mark.parametrize("op", sorted(SHAPES))
def test_peers_on_cpu_are_callables_or_reasons(op):
    mod = workloads.module(op)
    s = mod.normalize(SHAPES[op])
    inputs = mod.build(s, "cpu", torch.Generator().manual_seed(0))
    got = mod.peers(s, inputs)
    assert got, op
    for name, value in got.items():
        assert callable(value) or (isinstance(value, str) and value), (name, value)
        if callable(value):
            value()                        # torch's own peers run on the CPU
    # GPU / NPU peers are not offered for CPU tensors
    assert not any(n.startswith(("flashinfer", "flash_mla", "flag_gems", "torch_npu")) for n in got)


def test_every_op_has_its_peers_listed():
    assert {"flashinfer-decode", "torch-sdpa", "torch_npu-ifa", "torch_npu-fias"} <= set(peers.names("incre_flash_attention"))
    assert {"flash_mla", "flashinfer-mla", "flag_gems-mla", "torch-naive", "torch_npu-fias-mla",
            "torch_npu-atb-mla"} <= set(peers.names("mla_decode"))
    assert {"torch._grouped_mm", "torch._scaled_grouped_mm", "flashinfer-segment_gemm", "flag_gems-grouped_mm",
            "torch_npu-grouped_matmul"} <= set(peers.names("grouped_gemm"))


@pytest.mark.parametrize("op,name", [(op, n) for op in SHAPES for n, devs, _ in peers.PEERS[op] if devs])
def test_absent_or_failing_peer_is_a_reason(op, name, monkeypatch):
    """Device-specific peers called here (no GPU / NPU, packages absent or failing to import)
    answer with a reason instead of raising."""
    mod = workloads.module(op)
    s = mod.normalize(SHAPES[op])
    inputs = mod.build(s, "cpu", torch.Generator().manual_seed(0))
    adapter = next(a for n, _, a in peers.PEERS[op] if n == name)
    real_import = importlib.import_module

    def no_peers(mod_name, *a, **k):
        if mod_name.split(".")[0] in ("peer_flashinfer", "peer_flashmla", "flashinfer", "flash_mla",
                                      "flag_gems", "torch_npu"):
            raise ImportError(f"No module named {mod_name!r}")
        return real_import(mod_name, *a, **k)
    monkeypatch.setattr(peers.importlib, "import_module", no_peers)
    out = adapter(s, inputs)
    assert isinstance(out, str) and out


def test_a_peer_that_raises_while_preparing_is_na():
    @peers._guard
    def broken(s, inputs):
        raise RuntimeError("no kernel image for this GPU\nmore")
    assert broken({}, {}) == "failed while preparing: RuntimeError: no kernel image for this GPU"


def test_bench_rows_for_absent_peers(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(peers.PEERS, "grouped_gemm", peers.PEERS["grouped_gemm"] + [
        ("imaginary-peer", None, peers._guard(lambda s, i: peers._module("imaginary_peer_pkg")))])
    rc = cli.main(["bench", "--op", "grouped_gemm", "--shape", "g=2,m=4,n=32,k=64", "--backend", "reference",
                   "--runs", "2", "--budget", "0.01", "--out", str(tmp_path), "--no-plots"])
    out = capsys.readouterr().out
    assert rc == 0 and "imaginary-peer (peer)" in out and "n/a" in out and "imaginary_peer_pkg" in out


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                    reason="matplotlib not installed (scripts/setup.sh installs it)")
def test_one_plot_per_sweep(capsys, tmp_path):
    rc = cli.main(["bench", "--sweep", "quick-gg", "--backend", "reference", "--runs", "2", "--budget", "0.01",
                   "--out", str(tmp_path)])
    assert rc == 0
    png = tmp_path / "bench_quick-gg.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def _info(capsys, *argv):
    rc = cli.main(["info", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_info_shows_the_mla_plan(capsys):
    rc, out, _ = _info(capsys, "--op", "mla_decode", "--shape", "b=64,h_q=16,s_k=4096", "--device", "h100")
    assert rc == 0
    assert "DeviceProfile(" not in out
    for words in ("mla_decode b64 h16 s_k4096", "on backend cuda", "device: h100 (NVIDIA GPU): 132 SMs",
                  "kernel: CUDA transposed-tile wgmma split kernel", "split kernel                  wgmma_t",
                  "launch choices", "merge of split partials       in the split kernel",
                  "plan: MLA b=64 s_q=1 h_q=16/h_kv=1 bf16 dense: 132 parts", "num_sm_parts     132",
                  "part 0: begin_req=0", "splits per request: [2, 2"):
        assert words in out, words


@pytest.mark.parametrize("op,shape,words", [
    ("incre_flash_attention", "b=1,h_q=32,h_kv=8,s_kv=32768", "plan: IFA b=1 s_q=1 h_q=32/h_kv=8"),
    ("grouped_gemm", "g=8,m=64,recipe=fp8_blockwise", "plan: grouped GEMM contiguous G=8 M=512"),
    ("mla_decode", "b=4,s_k=8192,kv_format=fp8_v32,topk=2048", "sparse topk=2048"),
])
def test_info_plans_for_each_op(capsys, op, shape, words):
    for device in ("h200", "ascend910b3"):
        rc, out, _ = _info(capsys, "--op", op, "--shape", shape, "--device", device)
        assert rc == 0 and words in out and f"device: {device} (" in out and "plan fields:" in out
        assert "kernel: " + ("CUDA " if device == "h200" else "Ascend C ") in out and "launch choices" in out
        assert "DeviceProfile(" not in out, out


def test_info_shape_errors(capsys):
    rc, _, err = _info(capsys, "--shape", "b=1")
    assert rc == 2 and "--shape needs --op" in err
    rc, _, err = _info(capsys, "--op", "mla_decode", "--shape", "b=x")
    assert rc == 2 and "b must be a non-negative int" in err
    rc, _, err = _info(capsys, "--op", "mla_decode", "--shape", "bogus=1")
    assert rc == 2 and "unknown key" in err
    rc, _, err = _info(capsys, "--op", "mla_decode", "--shape", "b=1", "--device", "tpu9")
    assert rc == 2 and "unknown device profile" in err
