"""The peers' signatures (compat shims) give the same results as the native API."""
import torch

import dualops
from dualops.compat import flash_mla, torch_npu

bf16 = torch.bfloat16


def test_npu_incre_flash_attention_layouts_match_native(gen):
    B, N, N_kv, D, S = 2, 8, 2, 64, 48
    q = torch.randn(B, 1, N, D, generator=gen).to(bf16)
    k = torch.randn(B, S, N_kv, D, generator=gen).to(bf16)
    v = torch.randn(B, S, N_kv, D, generator=gen).to(bf16)
    lens = [48, 5]
    want = dualops.incre_flash_attention(q, k, v, kv_lens=torch.tensor(lens, dtype=torch.int32), softmax_scale=0.125)
    got_bsh = torch_npu.npu_incre_flash_attention(
        q.reshape(B, 1, N * D), k.reshape(B, S, N_kv * D), v.reshape(B, S, N_kv * D),
        actual_seq_lengths=lens, num_heads=N, num_key_value_heads=N_kv, scale_value=0.125)
    assert torch.equal(got_bsh, want.reshape(B, 1, N * D))
    got_bnsd = torch_npu.npu_incre_flash_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), actual_seq_lengths=lens,
        num_heads=N, num_key_value_heads=N_kv, scale_value=0.125, input_layout="BNSD")
    assert torch.equal(got_bnsd, want.transpose(1, 2))


def test_npu_incre_flash_attention_paged_int8(gen):
    B, N, N_kv, D, BS = 2, 4, 1, 64, 16
    q = torch.randn(B, 1, N, D, generator=gen).to(bf16)
    k = torch.randint(-100, 100, (6, BS, N_kv, D), generator=gen).to(torch.int8)
    v = torch.randint(-100, 100, (6, BS, N_kv, D), generator=gen).to(torch.int8)
    scale = torch.rand(2, N_kv * D, generator=gen) / 50
    offset = torch.randn(2, N_kv * D, generator=gen)
    bt = torch.tensor([[3, 0, 5], [1, 2, 4]], dtype=torch.int32)
    lens = torch.tensor([40, 17], dtype=torch.int32)
    want = dualops.incre_flash_attention(q, k, v, kv_lens=lens, block_table=bt, softmax_scale=1.0,
                                         k_scale=scale[0].view(N_kv, D), v_scale=scale[1].view(N_kv, D),
                                         k_offset=offset[0].view(N_kv, D), v_offset=offset[1].view(N_kv, D))
    got = torch_npu.npu_incre_flash_attention(
        q.reshape(B, 1, N * D), k.reshape(6, BS, N_kv * D), v.reshape(6, BS, N_kv * D),
        actual_seq_lengths=lens, antiquant_scale=scale, antiquant_offset=offset, block_table=bt,
        num_heads=N, num_key_value_heads=N_kv, block_size=BS)
    assert torch.equal(got, want.reshape(B, 1, N * D))


def test_flash_mla_shim_matches_native(gen):
    B, H, NB, PBS = 2, 16, 8, 16
    q = torch.randn(B, 1, H, 576, generator=gen).to(bf16)
    kv = torch.randn(NB, PBS, 1, 576, generator=gen).to(bf16)
    bt = torch.randperm(NB, generator=gen).to(torch.int32).view(B, NB // B)
    lens = torch.tensor([60, 3], dtype=torch.int32)
    meta, splits = flash_mla.get_mla_metadata()
    assert isinstance(meta, flash_mla.FlashMLASchedMeta) and splits is None
    out, lse = flash_mla.flash_mla_with_kvcache(q, kv, bt, lens, 512, meta, splits)
    want_out, want_lse = dualops.mla_decode(q, kv, bt, lens)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
