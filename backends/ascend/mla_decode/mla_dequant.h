// Vector-core dequantization of FP8 and int8 latent caches for MLA decode (the A2 cube has no
// FP8): the keys of a tile are dequantized in fp32 and rounded once to q's dtype into the GM
// workspace, where the cube reads them as K and V (docs/parity.md counts that rounding).
//   fp8_v32    (656 B/token): 512 e4m3 x 4 fp32 scales (one per 128) | 64 bf16 RoPE
//   int8_v32   (656 B/token): the same with 512 int8 values
//   fp8_model1 (584 B/token, per page block: tokens' [448 e4m3 | 64 bf16 RoPE], then 8 B of
//              scales per token: 7 e8m0 (one per 64) + pad)
// e4m3 bytes are decoded through a 256-entry fp16 table in UB and Gather (every e4m3 value is
// exact in fp16; 0x7F / 0xFF are NaN); int8 bytes by Cast int8 -> fp16 (exact). Then fp16 -> fp32
// times the fp32 scale, as the reference dequantizes. Rows of invalid keys are written as zeros, so the cube
// copies whole tiles and nothing unused is read. The two vector cores split the tile's rows.
#pragma once
#include "ascend/common/fp8.h"
#include "ascend/mla_decode/mla_common.h"

namespace dualops {
namespace mla {

// 2^(e - 127) of an e8m0 exponent byte (255 = NaN).
__aicore__ inline float E8m0ToFloat(uint32_t e) {
  union {
    uint32_t u;
    float f;
  } v;
  v.u = e == 255 ? 0x7FC00000u : (e == 0 ? 0x00400000u : (e << 23));
  return v.f;
}

template <typename QT>
class MlaDequant {
 public:
  __aicore__ inline void Init(const Args& a, AscendC::TPipe& pipe) {
    a_ = &a;
    tp_ = &pipe;
    v32_ = a.h.kv_format == MlaKvFormat::kFp8V32 || a.h.kv_format == MlaKvFormat::kInt8V32;
    int8_ = a.h.kv_format == MlaKvFormat::kInt8V32;
    nope_ = v32_ ? kV32Nope : kModel1Nope;
    pitch_ = v32_ ? RoundUp(kV32RopeByte, 32) : kModel1Data;   // UB bytes per raw row
    const int32_t d = a.h.d_qk;
    pipe.InitBuffer(raw_, kConvRows * pitch_);
    pipe.InitBuffer(aux_, kConvRows * (v32_ ? kRope * 2 : 32));   // v32: RoPE bf16; model1: scale bytes
    pipe.InitBuffer(h16_, kConvRows * pitch_ * sizeof(half));
    pipe.InitBuffer(idx_, kConvRows * pitch_ * sizeof(int32_t));
    pipe.InitBuffer(f32_, kConvRows * d * sizeof(float));
    pipe.InitBuffer(out_, kConvRows * d * sizeof(QT));
    pipe.InitBuffer(lut_, ascend::kE4m3TableBytes);
    ascend::FillE4m3Table(lut_.Get<uint16_t>());
    PipeSync<AscendC::HardEvent::S_V>(tp_);
  }

  // The first dv values of key j of tile t (a valid key), dequantized to fp32, into dst. Read
  // from the cache itself: the workspace slot may be refilled by the other vector core meanwhile.
  __aicore__ inline void ValueRow(const Pass& ps, const KeyMap& km, int32_t t, int32_t j,
                                  const AscendC::LocalTensor<float>& dst, int32_t dv) {
    PipeSync<AscendC::HardEvent::V_MTE2>(tp_);   // the last vector ops have read the staging
    PipeSync<AscendC::HardEvent::S_MTE2>(tp_);   // and the scalar unit the last scales
    DecodeRows(ps, km, t, j, 1, j + 1);
    AscendC::PipeBarrier<PIPE_V>();
    AscendC::Muls(dst, f32_.Get<float>(), 1.0f, dv);
    AscendC::PipeBarrier<PIPE_V>();
  }

  // This vector core's share of tile t's rows -> workspace slot t % kSlots.
  __aicore__ inline void ConvertTile(const Pass& ps, const KeyMap& km, int32_t t) {
    const int32_t n = a_->h.kv_tile;
    PipeSync<AscendC::HardEvent::V_MTE2>(tp_);   // ValueRow (the hidden-key check) may have read
    PipeSync<AscendC::HardEvent::S_MTE2>(tp_);   // the staging and its scales
    const int32_t half_rows = n / 2;
    const int32_t begin = AscendC::GetSubBlockIdx() == 0 ? 0 : half_rows;
    const int32_t nv = ps.TileKeys(n, t);
    for (int32_t c = begin; c < begin + half_rows; c += kConvRows) {
      ConvertRows(ps, km, t, c, MinI(kConvRows, begin + half_rows - c), nv);
    }
  }

 private:
  // Tile rows [c, c + cn) (keys past nv or invalid: zero rows), dequantized to fp32 in f32_.
  __aicore__ inline void DecodeRows(const Pass& ps, const KeyMap& km, int32_t t, int32_t c, int32_t cn, int32_t nv) {
    const Args& a = *a_;
    const int32_t d = a.h.d_qk;
    AscendC::LocalTensor<uint8_t> raw = raw_.Get<uint8_t>();
    AscendC::LocalTensor<uint8_t> aux = aux_.Get<uint8_t>();
    int64_t rows[kConvRows];
    const int32_t key0 = ps.k0 + t * a.h.kv_tile + c;
    for (int32_t r = 0; r < cn;) {
      int32_t pool = 0, run = 1;
      const int64_t row = c + r < nv ? km.Row(key0 + r, MinI(cn - r, nv - c - r), pool, run) : -1;
      for (int32_t j = 0; j < run; ++j) rows[r + j] = row < 0 ? -1 : row + j;
      if (row >= 0) LoadRaw(raw, aux, pool, row, r, run);
      r += run;
    }
    PipeSync<AscendC::HardEvent::MTE2_V>(tp_);
    PipeSync<AscendC::HardEvent::MTE2_S>(tp_);
    AscendC::LocalTensor<half> h = h16_.Get<half>();
    AscendC::LocalTensor<int32_t> idx = idx_.Get<int32_t>();
    AscendC::LocalTensor<float> f = f32_.Get<float>();
    const uint32_t bytes = static_cast<uint32_t>(cn * pitch_);
    // The value bytes -> fp16 (the scale and RoPE bytes decode to values nothing reads).
    if (int8_) {
      AscendC::Cast(h, raw.template ReinterpretCast<int8_t>(), AscendC::RoundMode::CAST_NONE, bytes);   // exact
    } else {
      ascend::E4m3ToHalf(h, raw, h, idx, lut_.Get<uint16_t>(), bytes);
    }
    AscendC::PipeBarrier<PIPE_V>();
    const int32_t seg = v32_ ? 128 : 64;
    for (int32_t r = 0; r < cn; ++r) {
      AscendC::LocalTensor<float> fr = f[r * d];
      if (rows[r] < 0) {
        AscendC::Duplicate(fr, 0.0f, d);
        continue;
      }
      AscendC::Cast(fr, h[r * pitch_], AscendC::RoundMode::CAST_NONE, nope_);
      AscendC::PipeBarrier<PIPE_V>();
      for (int32_t s = 0; s < nope_ / seg; ++s) {
        const float scale = v32_ ? raw.template ReinterpretCast<float>().GetValue((r * pitch_ + kV32Nope) / 4 + s)
                                 : E8m0ToFloat(aux.GetValue(r * 32 + s));
        AscendC::Muls(fr[s * seg], fr[s * seg], scale, seg);
      }
      AscendC::LocalTensor<bfloat16_t> rope = v32_ ? aux.template ReinterpretCast<bfloat16_t>()[r * kRope]
                                                   : raw.template ReinterpretCast<bfloat16_t>()[(r * pitch_ + nope_) / 2];
      AscendC::Cast(fr[nope_], rope, AscendC::RoundMode::CAST_NONE, kRope);
    }
  }

  // Tile rows [c, c + cn): load the valid ones' bytes, decode, scale, round to q's dtype, store.
  __aicore__ inline void ConvertRows(const Pass& ps, const KeyMap& km, int32_t t, int32_t c, int32_t cn, int32_t nv) {
    const Args& a = *a_;
    const int32_t d = a.h.d_qk;
    AscendC::LocalTensor<float> f = f32_.Get<float>();
    DecodeRows(ps, km, t, c, cn, nv);
    AscendC::PipeBarrier<PIPE_V>();
    const uint32_t count = static_cast<uint32_t>(cn * d);
    AscendC::LocalTensor<QT> k16 = out_.Get<QT>();
    AscendC::Cast(k16, f, AscendC::RoundMode::CAST_RINT, count);
    PipeSync<AscendC::HardEvent::V_MTE3>(tp_);
    const uint64_t tile = static_cast<uint64_t>(a.h.kv_tile) * d;
    AscendC::GlobalTensor<QT> w;
    w.SetGlobalBuffer(a.Ws<QT>(a.ws.k), kSlots * tile);
    AscendC::DataCopy(w[static_cast<uint64_t>(t % kSlots) * tile + static_cast<uint64_t>(c) * d], k16, count);
    PipeSync<AscendC::HardEvent::MTE3_V>(tp_);
    PipeSync<AscendC::HardEvent::MTE3_MTE2>(tp_);
    PipeSync<AscendC::HardEvent::V_MTE2>(tp_);
    PipeSync<AscendC::HardEvent::S_MTE2>(tp_);
  }

  // `run` tokens from token row `row` of pool `pool` (consecutive rows of one page block) into
  // raw rows [r, r + run) (and their RoPE / scales into aux).
  __aicore__ inline void LoadRaw(const AscendC::LocalTensor<uint8_t>& raw, const AscendC::LocalTensor<uint8_t>& aux,
                                 int32_t pool, int64_t row, int32_t r, int32_t run) {
    const Args& a = *a_;
    __gm__ uint8_t* base = Gm<uint8_t>(pool == 0 ? a.p.kv_cache : a.p.extra_kv_cache);
    AscendC::GlobalTensor<uint8_t> g;
    g.SetGlobalBuffer(base);
    const uint16_t cnt = static_cast<uint16_t>(run);
    if (v32_) {
      const int64_t off = row * kV32Bytes;
      AscendC::DataCopyPad(raw[r * pitch_], g[off],
                           AscendC::DataCopyExtParams(cnt, kV32RopeByte, kV32Bytes - kV32RopeByte, 0, 0),
                           AscendC::DataCopyPadExtParams<uint8_t>(false, 0, 0, 0));
      AscendC::GlobalTensor<bfloat16_t> rg;
      rg.SetGlobalBuffer(reinterpret_cast<__gm__ bfloat16_t*>(base));
      AscendC::DataCopyPad(aux.template ReinterpretCast<bfloat16_t>()[r * kRope], rg[(off + kV32RopeByte) / 2],
                           AscendC::DataCopyExtParams(cnt, kRope * 2, kV32Bytes - kRope * 2, 0, 0),
                           AscendC::DataCopyPadExtParams<bfloat16_t>(false, 0, 0, bfloat16_t(0)));
      return;
    }
    const int64_t pbs = pool == 0 ? a.h.page_block_size : a.h.extra_page_block_size;
    const int64_t blk = row / pbs, tok = row % pbs;
    const int64_t block0 = blk * pbs * kModel1Bytes;
    AscendC::DataCopyPad(raw[r * pitch_], g[block0 + tok * kModel1Data],
                         AscendC::DataCopyExtParams(cnt, kModel1Data, 0, 0, 0),
                         AscendC::DataCopyPadExtParams<uint8_t>(false, 0, 0, 0));
    AscendC::DataCopyPad(aux[r * 32], g[block0 + pbs * kModel1Data + tok * kModel1Scales],
                         AscendC::DataCopyExtParams(cnt, kModel1Scales, 0, 0, 0),
                         AscendC::DataCopyPadExtParams<uint8_t>(false, 0, 0, 0));
  }

  const Args* a_ = nullptr;
  AscendC::TPipe* tp_ = nullptr;
  bool v32_ = true, int8_ = false;
  int32_t nope_ = kV32Nope, pitch_ = 544;
  AscendC::TBuf<AscendC::TPosition::VECCALC> raw_, aux_, h16_, idx_, f32_, out_, lut_;
};

}  // namespace mla
}  // namespace dualops
