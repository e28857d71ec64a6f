// Vector-core antiquant of the IFA kernel: K/V tiles of an int8, fp8 (e4m3) or other-16-bit
// cache become q-dtype tiles in the GM workspace, which the cube then multiplies.
//   int8:  (x + offset) * scale   (CANN's antiquant convention), per channel, in fp32
//   fp8:   x * scale; the e4m3 bytes are decoded with a 256-entry fp16 table in UB and Gather,
//          since the A2 vector unit has no fp8 type (every e4m3 value is exact in fp16)
//   16-bit of the other type (bf16 cache, fp16 q or the reverse): Cast through fp32
// Each converted tile goes to the workspace rounded once to q's dtype (round to nearest; +-inf
// and NaN stay what they are). The two vector cores split the tile's rows.
#pragma once
#include "ascend/common/fp8.h"
#include "ascend/incre_flash_attention/ifa_common.h"

namespace dualops {
namespace ifa {

template <typename QT, typename KT>
class IfaConvert {
 public:
  static constexpr bool kInt8 = IsSame<KT, int8_t>::value;
  static constexpr bool kFp8 = IsSame<KT, uint8_t>::value;
  static constexpr bool k16 = !kInt8 && !kFp8;

  // The loader only (ValueRows; a cache of q's dtype that needs no conversion).
  __aicore__ inline void InitLoader(const Args& a, AscendC::TPipe& pipe) {
    a_ = &a;
    const int32_t d = a.t.head_dim;
    rows_ = MaxI(1, static_cast<int32_t>(kDequantChunk) / d);
    // (chunks are rounded up to 64 floats: whole 256-B vector repeats)
    const uint32_t elems = static_cast<uint32_t>(RoundUp(rows_ * d, 64));
    pipe.InitBuffer(raw_, elems * sizeof(KT));
    pipe.InitBuffer(f32_, elems * sizeof(float));
  }

  __aicore__ inline void Init(const Args& a, AscendC::TPipe& pipe) {
    InitLoader(a, pipe);
    const int32_t d = a.t.head_dim;
    const uint32_t elems = static_cast<uint32_t>(RoundUp(rows_ * d, 64));
    pipe.InitBuffer(out_, elems * sizeof(QT));
    if (!k16) pipe.InitBuffer(h16_, elems * sizeof(half));
    if (kFp8) {
      pipe.InitBuffer(idx_, elems * sizeof(int32_t));
      pipe.InitBuffer(lut_, ascend::kE4m3TableBytes);
      ascend::FillE4m3Table(lut_.Get<uint16_t>());
      PipeSync<AscendC::HardEvent::S_V>();   // Gather reads the table
    }
    if (!k16) pipe.InitBuffer(vec_, 4 * d * sizeof(float));   // k scale, k offset, v scale, v offset
  }

  // Per-channel scale / offset rows of this unit's kv head.
  __aicore__ inline void StartUnit(const Unit& u) {
    unit_ = &u;
    kloc_.Init(*a_, u.b, u.kvh);
    if (k16) return;
    const int32_t d = a_->t.head_dim;
    AscendC::LocalTensor<float> v = vec_.Get<float>();
    PipeSync<AscendC::HardEvent::V_MTE2>();   // the last unit's Add / Mul read the vectors
    LoadVec(v, a_->g.k_scale, u.kvh, 1.0f);
    LoadVec(v[d], a_->g.k_offset, u.kvh, 0.0f);
    LoadVec(v[2 * d], a_->g.v_scale, u.kvh, 1.0f);
    LoadVec(v[3 * d], a_->g.v_offset, u.kvh, 0.0f);
    has_k_off_ = a_->g.k_offset != 0;
    has_v_off_ = a_->g.v_offset != 0;
    PipeSync<AscendC::HardEvent::MTE2_V>();
  }

  // Value rows [c, c + cn) of kv tile t (cn <= ChunkRows()), dequantized to fp32 (D floats a
  // row), valid until the next call. Read from the cache itself, not from the workspace slot,
  // which the other vector core may be refilling.
  __aicore__ inline AscendC::LocalTensor<float> ValueRows(int32_t t, int32_t c, int32_t cn) {
    PipeSync<AscendC::HardEvent::V_MTE2>();   // the last vector ops have read the staging
    LoadRows(true, t, c, cn);
    VecBarrier();
    return f32_.Get<float>();
  }
  __aicore__ inline int32_t ChunkRows() const { return rows_; }
  // The same rows as they are in the cache (a 16-bit cache: KT elements), valid until the next call.
  __aicore__ inline AscendC::LocalTensor<KT> RawValueRows(int32_t t, int32_t c, int32_t cn) {
    PipeSync<AscendC::HardEvent::V_MTE2>();
    LoadRaw(true, t, c, cn);
    return raw_.Get<KT>();
  }

  // This vector core's share of the rows of kv tile t, K and V, into workspace slot t % kSlots.
  __aicore__ inline void ConvertTile(int32_t t) {
    const Args& a = *a_;
    PipeSync<AscendC::HardEvent::V_MTE2>();   // the hidden-key fix-up may have read the staging
    const int32_t nv = unit_->TileKeys(a, t);
    const int32_t half_rows = (nv + 1) / 2;
    const int32_t r_begin = AscendC::GetSubBlockIdx() == 0 ? 0 : half_rows;
    const int32_t r_end = AscendC::GetSubBlockIdx() == 0 ? half_rows : nv;
    for (int32_t c = r_begin; c < r_end; c += rows_) {
      const int32_t cn = MinI(rows_, r_end - c);
      ConvertRows(false, t, c, cn);
      ConvertRows(true, t, c, cn);
    }
  }

 private:

  __aicore__ inline void LoadVec(const AscendC::LocalTensor<float>& dst, uint64_t src, int32_t kvh, float fill) {
    const int32_t d = a_->t.head_dim;
    if (src == 0) {
      AscendC::Duplicate(dst, fill, d);
      return;
    }
    AscendC::GlobalTensor<float> g;
    g.SetGlobalBuffer(ascend::GmPtr<float>(src), static_cast<uint64_t>(a_->t.h_kv) * d);
    AscendC::DataCopy(dst, g[static_cast<uint64_t>(kvh) * d], d);
  }

  // Rows [c, c + cn) of kv tile t's K or V as they are in the cache into raw_ (D per row).
  __aicore__ inline void LoadRaw(bool is_v, int32_t t, int32_t c, int32_t cn) {
    const Args& a = *a_;
    const int32_t d = a.t.head_dim;
    AscendC::LocalTensor<KT> raw = raw_.Get<KT>();
    // Rows of the cache (each block's run in one strided copy) -> UB, D elements per row.
    AscendC::GlobalTensor<KT> cache;
    cache.SetGlobalBuffer(ascend::GmPtr<KT>(is_v ? a.g.v : a.g.k));
    const int64_t s0 = is_v ? a.p.v_stride_0 : a.p.k_stride_0;
    const int64_t s1 = is_v ? a.p.v_stride_1 : a.p.k_stride_1;
    const int64_t s2 = is_v ? a.p.v_stride_2 : a.p.k_stride_2;
    const int32_t key0 = unit_->k0 + t * a.t.kv_tile + c;
    for (int32_t r = 0; r < cn;) {
      int32_t run;
      const int64_t off = kloc_.Offset(key0 + r, cn - r, s0, s1, s2, run);
      if (s1 >= d) {
        AscendC::DataCopyPad(raw[r * d], cache[off],
                             AscendC::DataCopyExtParams(static_cast<uint16_t>(run), d * sizeof(KT),
                                                        static_cast<uint32_t>((s1 - d) * sizeof(KT)), 0, 0),
                             AscendC::DataCopyPadExtParams<KT>(false, 0, 0, KT(0)));
      } else {
        for (int32_t j = 0; j < run; ++j) {
          AscendC::DataCopyPad(raw[(r + j) * d], cache[off + j * s1],
                               AscendC::DataCopyExtParams(1, d * sizeof(KT), 0, 0, 0),
                               AscendC::DataCopyPadExtParams<KT>(false, 0, 0, KT(0)));
        }
      }
      r += run;
    }
    PipeSync<AscendC::HardEvent::MTE2_V>();
  }

  // Rows [c, c + cn) of kv tile t's K or V, dequantized to fp32 in f32_ (D floats per row).
  __aicore__ inline void LoadRows(bool is_v, int32_t t, int32_t c, int32_t cn) {
    const int32_t d = a_->t.head_dim;
    const uint32_t count = static_cast<uint32_t>(cn * d);
    AscendC::LocalTensor<KT> raw = raw_.Get<KT>();
    AscendC::LocalTensor<float> f = f32_.Get<float>();
    LoadRaw(is_v, t, c, cn);
    if constexpr (kInt8) {
      AscendC::LocalTensor<half> h = h16_.Get<half>();
      AscendC::Cast(h, raw, AscendC::RoundMode::CAST_NONE, count);
      VecBarrier();
      AscendC::Cast(f, h, AscendC::RoundMode::CAST_NONE, count);
    } else if constexpr (kFp8) {
      AscendC::LocalTensor<half> h = h16_.Get<half>();
      ascend::E4m3ToHalf(h, raw, h, idx_.Get<int32_t>(), lut_.Get<uint16_t>(), count);
      VecBarrier();
      AscendC::Cast(f, h, AscendC::RoundMode::CAST_NONE, count);
    } else {
      AscendC::Cast(f, raw, AscendC::RoundMode::CAST_NONE, count);
    }
    if constexpr (!k16) {
      AscendC::LocalTensor<float> v = vec_.Get<float>();
      const AscendC::LocalTensor<float> scale = v[(is_v ? 2 : 0) * d];
      const AscendC::LocalTensor<float> offset = v[(is_v ? 3 : 1) * d];
      const bool has_off = kInt8 && (is_v ? has_v_off_ : has_k_off_);
      for (int32_t r = 0; r < cn; ++r) {
        VecBarrier();
        if (has_off) AscendC::Add(f[r * d], f[r * d], offset, d);
        VecBarrier();
        AscendC::Mul(f[r * d], f[r * d], scale, d);
      }
    }
  }

  __aicore__ inline void ConvertRows(bool is_v, int32_t t, int32_t c, int32_t cn) {
    const Args& a = *a_;
    const int32_t d = a.t.head_dim;
    const uint32_t count = static_cast<uint32_t>(cn * d);
    AscendC::LocalTensor<float> f = f32_.Get<float>();
    AscendC::LocalTensor<QT> out = out_.Get<QT>();
    LoadRows(is_v, t, c, cn);
    VecBarrier();
    AscendC::Cast(out, f, AscendC::RoundMode::CAST_RINT, static_cast<uint32_t>(RoundUp(cn * d, 64)));
    PipeSync<AscendC::HardEvent::V_MTE3>();
    AscendC::GlobalTensor<QT> w;
    w.SetGlobalBuffer(a.Ws<QT>(is_v ? a.ws.v : a.ws.k), static_cast<uint64_t>(kSlots) * a.t.kv_tile * d);
    AscendC::DataCopy(w[(static_cast<uint64_t>(t % kSlots) * a.t.kv_tile + c) * d], out, count);
    PipeSync<AscendC::HardEvent::MTE3_MTE2>();
    PipeSync<AscendC::HardEvent::MTE3_V>();
  }

  const Args* a_ = nullptr;
  const Unit* unit_ = nullptr;
  KeyLocator kloc_;
  int32_t rows_ = 1;
  bool has_k_off_ = false, has_v_off_ = false;
  AscendC::TBuf<AscendC::TPosition::VECCALC> raw_, h16_, f32_, idx_, out_, lut_, vec_;
};

}  // namespace ifa
}  // namespace dualops
