"""The npu backend's glue, checked without an NPU: the custom ops have an implementation for
torch_npu's dispatch key (PrivateUse1); the schema gives npu the simulator's capabilities; the
backend reports why it is unavailable here; and each op module, run with its launch redirected
to the simulator (CPU tensors standing in for NPU ones), passes its kernel exactly the kernel
entry's GM_ADDR arguments, block count and tiling, and gets the reference's result. The launch
itself (_C.npu_launch, CANN's aclrtlaunch_<kernel>) and torch_npu's stream are never run here."""
from __future__ import annotations

import importlib.util
import math
import pathlib
import re

import pytest
import torch

import dualops
from dualops import native, reference, testing
from dualops.backends import ascend_sim, npu
from dualops.backends.ascend_sim import _common as sim_common
from dualops.backends.npu import _common as npu_common

ROOT = pathlib.Path(__file__).resolve().parents[1]
OPS = ("incre_flash_attention", "mla_decode", "grouped_gemm")
needs_sim = pytest.mark.skipif(not ascend_sim.status()[0], reason="dualops._C with the Ascend simulator is not built")


def _entry_arity(op: str) -> int:
    text = (ROOT / f"backends/ascend/{op}/{op}_kernel.cpp").read_text()
    m = re.search(rf'extern "C" __global__ __aicore__ void {op}\(([^)]*)\)', text)
    return len(m.group(1).split(","))


@pytest.mark.parametrize("op", OPS)
def test_custom_op_has_npu_dispatch_key_kernel(op):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"dualops::{op}", "PrivateUse1")


@pytest.mark.parametrize("op", OPS)
def test_npu_capabilities_are_the_simulators(op):
    from dualops import schema

    caps = schema.load(op).capabilities
    assert caps["npu"] == caps["ascend_sim"]
    assert dualops.supports(op, "npu")


def test_npu_unavailable_here_says_why():
    ok, why = npu.status()
    assert not ok
    if importlib.util.find_spec("torch_npu") is None:
        assert "torch_npu is not installed" in why and "ascend_sim" in why, why
        assert "CANN" in why, why
    mod, _ = native.load()
    if mod is not None and not hasattr(mod, "npu_launch"):
        assert npu.built_ops() == ()


def test_cann_version_read_from_the_install_record(tmp_path, monkeypatch):
    (tmp_path / "ascend_toolkit_install.info").write_text("package_name=Ascend-cann-toolkit\nversion=8.1.RC1\n")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path))
    assert npu._cann_install_version() == "8.1.RC1"
    monkeypatch.delenv("ASCEND_HOME_PATH")
    assert npu._cann_install_version() is None


@pytest.fixture
def launches(monkeypatch):
    """The npu op modules with their launch run on the simulator; records each launch."""
    seen = []

    def launch(op, kernel, num_cores, args, regions, prof, plan):
        seen.append(dict(op=op, kernel=kernel, num_cores=num_cores, args=list(args)))
        return sim_common.launch(op, kernel, num_cores, args, regions, prof, plan)

    monkeypatch.setattr(npu_common, "TARGET", sim_common.Target("npu", "cpu", sim_common.active_profile, launch))
    return seen


def _check_launch(seen, op, prof_cores):
    assert len(seen) == 1 and seen[0]["kernel"] == op, seen
    assert len(seen[0]["args"]) == _entry_arity(op), (op, len(seen[0]["args"]))
    assert all(isinstance(a, int) for a in seen[0]["args"])
    assert 1 <= seen[0]["num_cores"] <= prof_cores


@needs_sim
def test_npu_ifa_glue(launches):
    from dualops.backends.npu import incre_flash_attention as m

    torch.manual_seed(0)
    q = torch.randn(2, 1, 8, 64, dtype=torch.bfloat16)
    k = torch.randn(2, 96, 2, 64, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    lens = torch.tensor([96, 33], dtype=torch.int32)
    out, _ = m.incre_flash_attention(q, k, v, kv_lens=lens, block_table=None, softmax_scale=1 / 8, causal=False,
                                     atten_mask=None, pse_shift=None, k_scale=None, v_scale=None, k_offset=None,
                                     v_offset=None)
    _check_launch(launches, "incre_flash_attention", sim_common.active_profile().num_cores)
    ref, _, budget = reference.incre_flash_attention(q, k, v, kv_lens=lens, softmax_scale=1 / 8, return_budget=True)
    testing.assert_close_parity(out, ref, budget=budget.out)


@needs_sim
def test_npu_mla_glue(launches):
    from dualops.backends.npu import mla_decode as m

    torch.manual_seed(0)
    q = torch.randn(2, 1, 16, 576, dtype=torch.bfloat16)
    kv = torch.randn(8, 64, 1, 576, dtype=torch.bfloat16)
    table = torch.arange(8, dtype=torch.int32).view(2, 4)
    lens = torch.tensor([200, 17], dtype=torch.int32)
    scale = 1 / math.sqrt(576)
    out, _ = m.mla_decode(q, kv, table, lens, head_dim_v=512, plan=None, softmax_scale=scale, causal=False,
                          kv_format="bf16", indices=None, topk_length=None, attn_sink=None, extra_kv_cache=None,
                          extra_indices=None, extra_topk_length=None)
    _check_launch(launches, "mla_decode", sim_common.active_profile().num_cores)
    ref, _, budget = reference.mla_decode(q, kv, table, lens, head_dim_v=512, softmax_scale=scale, return_budget=True)
    testing.assert_close_parity(out, ref, budget=budget.out)


@needs_sim
def test_npu_grouped_gemm_glue(launches):
    from dualops.backends.npu import grouped_gemm as m

    torch.manual_seed(0)
    x = torch.randn(10, 64, dtype=torch.bfloat16)
    w = torch.randn(3, 32, 64, dtype=torch.bfloat16)
    offs = torch.tensor([0, 4, 4, 10], dtype=torch.int32)
    y = m.grouped_gemm(x, w, group_offsets=offs)
    _check_launch(launches, "grouped_gemm", sim_common.active_profile().num_cores)
    ref, budget = reference.grouped_gemm(x, w, group_offsets=offs, return_budget=True)
    testing.assert_close_parity(y, ref, budget=budget)


def test_npu_op_module_refuses_cpu_tensors():
    from dualops.backends.npu import grouped_gemm as m

    x = torch.randn(4, 64, dtype=torch.bfloat16)
    w = torch.randn(1, 32, 64, dtype=torch.bfloat16)
    if not ascend_sim.status()[0]:
        pytest.skip("dualops._C is not built")
    with pytest.raises(ValueError, match="npu runs on NPU tensors, got x on cpu"):
        m.grouped_gemm(x, w, group_offsets=torch.tensor([0, 4], dtype=torch.int32))
