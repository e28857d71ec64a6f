// Keys a row does not attend must have no effect on it (docs/values.md), but the cube's
// O = P . V multiplies their P = 0 by their values, and 0 * NaN or 0 * inf is NaN. The vector
// cores fix that up per kv tile, between the cube's O and the accumulate:
//   1. only when some key of the tile is hidden from some row of this core (causal S_q > 1 and
//      the tile reaches past a row's limit, or an atten_mask: calls without either do nothing),
//      the keys hidden from any of the core's rows are found (the mask applied to rows of zeros);
//   2. their values are checked: up to kPerKeyMax keys one by one (the sum of v - v is 0 or NaN),
//      more (a mask hiding many keys) as the whole tile's values in chunks (16-bit caches by the
//      exponent bits), where a non-finite value of an attended key also leads to step 3 (exact
//      either way); finite: done (the common case);
//   3. otherwise this core's O rows of the tile are recomputed from P (as the cube took it) and
//      the values of the keys each row sees, in fp32, and replace the cube's rows in the
//      O slot before the accumulate reads them.
// Values come from the cache through IfaConvert::ValueRows (dequantized for converted caches),
// never from the workspace tile the other vector core refills meanwhile; a core reads only its own rows of P
// and O, so nothing here needs the other vector core.
#pragma once
#include "ascend/incre_flash_attention/ifa_convert.h"
#include "ascend/incre_flash_attention/ifa_mask.h"

namespace dualops {
namespace ifa {

// UB the vector side lends while the fix-up runs (none of it holds live data then).
template <typename QT>
struct HiddenScratch {
  AscendC::LocalTensor<float> vis;    // rows * np: 0 where the row sees the key, -inf where not
  AscendC::LocalTensor<float> p;      // rows * np: P of the rows in fp32
  AscendC::LocalTensor<float> tmp;    // out_rows * D >= max(rows * np, np) floats: the union,
                                      // p * v, v - v of a chunk
  AscendC::LocalTensor<float> out;    // out_rows * D >= max(rows, 2) * D floats: O rows, the check
  AscendC::LocalTensor<float> red;    // 8 floats + reduce scratch for D
  AscendC::LocalTensor<QT> stage;     // rows * np: P as read
};

template <typename QT, typename KT>
class IfaHidden {
 public:
  static constexpr int32_t kPerKeyMax = 16;   // hidden keys checked one by one; more: whole tile

  // Whether a call can hide keys from rows at all (else Run returns at once).
  __aicore__ static inline bool Needed(const Args& a) {
    return (a.p.causal && a.t.s_q > 1) || a.g.atten_mask != 0;
  }

  // rows: O rows recomputed per step; np: score row pitch; out_rows: D-float rows of s.out / s.tmp.
  __aicore__ inline void Init(const Args& a, IfaMask* mask, IfaConvert<QT, KT>* conv, const HiddenScratch<QT>& s,
                              int32_t rows, int32_t np, int32_t out_rows) {
    a_ = &a;
    mask_ = mask;
    conv_ = conv;
    s_ = s;
    rows_ = rows;
    np_ = np;
    out_rows_ = out_rows;
  }

  // Tile t of unit u, pass rows from r0, this core's pass rows [rs, re).
  __aicore__ inline void Run(const Unit& u, int32_t r0, int32_t rs, int32_t re, int32_t t) {
    const Args& a = *a_;
    if (re <= rs || !Needed(a)) return;
    const int32_t nv = u.TileKeys(a, t), t0 = u.k0 + t * a.t.kv_tile;
    if (a.g.atten_mask == 0) {   // causal only: the smallest limit of the core's rows
      int32_t lim = u.kv_len;
      for (int32_t r = rs; r < re; ++r) {
        int32_t i, h;
        RowCoords(a, u.kvh, r0 + r, i, h);
        lim = MinI(lim, mask_->KeyLimit(u, i));
      }
      if (lim - t0 >= nv) return;
    }
    u_ = &u;
    r0_ = r0;
    t_ = t;
    if (HiddenValuesFinite(rs, re, nv, t0)) return;
    Recompute(rs, re, nv, t0);
  }

 private:
  // Step 1 and 2: whether the values of the keys hidden from some row in [rs, re) are finite.
  __aicore__ inline bool HiddenValuesFinite(int32_t rs, int32_t re, int32_t nv, int32_t t0) {
    const int32_t d = a_->t.head_dim;
    AscendC::LocalTensor<float> uni = s_.tmp;
    AscendC::LocalTensor<float> chk = s_.out;
    AscendC::LocalTensor<float> diff = s_.out[d];
    PipeSync<AscendC::HardEvent::MTE3_V>();   // the last row writes have read the buffers
    AscendC::Duplicate(uni, 0.0f, np_);
    for (int32_t c = rs; c < re; c += rows_) {
      const int32_t cn = MinI(rows_, re - c);
      AscendC::Duplicate(s_.vis, 0.0f, cn * np_);
      VecBarrier();
      mask_->Rows(s_.vis, *u_, r0_, c, cn, nv, t0);
      for (int32_t r = 0; r < cn; ++r) {
        AscendC::Min(uni, uni, s_.vis[r * np_], np_);
        VecBarrier();
      }
    }
    PipeSync<AscendC::HardEvent::V_S>();
    int32_t keys[kPerKeyMax];
    int32_t count = 0;
    for (int32_t j = 0; j < nv; ++j) {
      if (uni.GetValue(j) != kNegInf) continue;
      if (count < kPerKeyMax) keys[count] = j;
      ++count;
    }
    if (count == 0) return true;
    if (count <= kPerKeyMax) {
      AscendC::Duplicate(chk, 0.0f, d);
      for (int32_t k = 0; k < count; ++k) {
        const AscendC::LocalTensor<float> v = conv_->ValueRows(t_, keys[k], 1);
        AscendC::Sub(diff, v, v, d);
        VecBarrier();
        AscendC::Add(chk, chk, diff, d);
        VecBarrier();
      }
    } else {
      return TileValuesFinite(nv);
    }
    AscendC::ReduceSum(s_.red, chk, s_.red[8], d);
    PipeSync<AscendC::HardEvent::V_S>();
    const bool finite = s_.red.GetValue(0) == 0.0f;
    PipeSync<AscendC::HardEvent::S_V>();
    return finite;
  }

  // Whether every value of tile t_'s nv keys is finite, in chunks of rows.
  __aicore__ inline bool TileValuesFinite(int32_t nv) {
    const int32_t d = a_->t.head_dim;
    const int32_t cr = MinI(conv_->ChunkRows(), out_rows_);
    if constexpr (IfaConvert<QT, KT>::k16) {
      // 16-bit cache: the running max of (bits & exponent mask) is the exponent mask (the bits
      // of +inf) iff some value is inf or NaN; two 16-bit ops per value.
      AscendC::LocalTensor<int16_t> acc = s_.out.template ReinterpretCast<int16_t>();
      AscendC::LocalTensor<int16_t> em = s_.tmp.template ReinterpretCast<int16_t>();
      AscendC::LocalTensor<int16_t> bits = em[cr * d];
      const int16_t exp_mask = IsSame<KT, half>::value ? 0x7C00 : 0x7F80;
      AscendC::Duplicate(acc, static_cast<int16_t>(0), cr * d);
      AscendC::Duplicate(em, exp_mask, cr * d);
      for (int32_t c = 0; c < nv; c += cr) {
        const int32_t cn = MinI(cr, nv - c);
        const AscendC::LocalTensor<KT> raw = conv_->RawValueRows(t_, c, cn);
        AscendC::And(bits, raw.template ReinterpretCast<int16_t>(), em, cn * d);
        VecBarrier();
        AscendC::Max(acc, acc, bits, cn * d);
        VecBarrier();
      }
      for (int32_t r = 1; r < cr; ++r) {
        AscendC::Max(acc, acc, acc[r * d], d);
        VecBarrier();
      }
      AscendC::Cast(s_.tmp, acc.template ReinterpretCast<KT>(), AscendC::RoundMode::CAST_NONE, d);
      VecBarrier();
      AscendC::ReduceMax(s_.red, s_.tmp, s_.red[8], d, false);
      PipeSync<AscendC::HardEvent::V_S>();
      const bool finite = s_.red.GetValue(0) != kPosInf;
      PipeSync<AscendC::HardEvent::S_V>();
      return finite;
    } else {   // dequantized values: sums of v - v (0 or NaN)
      AscendC::LocalTensor<float> chk = s_.out;
      AscendC::Duplicate(chk, 0.0f, cr * d);
      for (int32_t c = 0; c < nv; c += cr) {
        const int32_t cn = MinI(cr, nv - c);
        const AscendC::LocalTensor<float> v = conv_->ValueRows(t_, c, cn);
        AscendC::Sub(s_.tmp, v, v, cn * d);
        VecBarrier();
        AscendC::Add(chk, chk, s_.tmp, cn * d);
        VecBarrier();
      }
      for (int32_t r = 1; r < cr; ++r) {
        AscendC::Add(chk, chk, chk[r * d], d);
        VecBarrier();
      }
      AscendC::ReduceSum(s_.red, chk, s_.red[8], d);
      PipeSync<AscendC::HardEvent::V_S>();
      const bool finite = s_.red.GetValue(0) == 0.0f;
      PipeSync<AscendC::HardEvent::S_V>();
      return finite;
    }
  }

  // Step 3: O rows [rs, re) of the tile = sum over the keys each row sees of p * v.
  __aicore__ inline void Recompute(int32_t rs, int32_t re, int32_t nv, int32_t t0) {
    const Args& a = *a_;
    const int32_t d = a.t.head_dim, n = a.t.kv_tile;
    const uint64_t slot = static_cast<uint64_t>(t_ % kSlots);
    const uint64_t p_tile = static_cast<uint64_t>(a.cube.rows_p) * n;
    AscendC::GlobalTensor<QT> pg;
    pg.SetGlobalBuffer(a.Ws<QT>(a.ws.p) + slot * p_tile, p_tile);
    AscendC::GlobalTensor<float> og;
    og.SetGlobalBuffer(a.Ws<float>(a.ws.o) + slot * a.cube.rows_p * d, static_cast<uint64_t>(a.cube.rows_p) * d);
    AscendC::LocalTensor<QT> p16 = s_.stage;
    const uint16_t gap_q = static_cast<uint16_t>((np_ - n) * sizeof(QT) / 32);
    for (int32_t c = rs; c < re; c += rows_) {
      const int32_t cn = MinI(rows_, re - c);
      const uint32_t count = static_cast<uint32_t>(cn * np_);
      PipeSync<AscendC::HardEvent::V_MTE2>();   // the last casts have read the staging
      const AscendC::DataCopyParams rows(cn, static_cast<uint16_t>(n * sizeof(QT) / 32), 0, gap_q);
      AscendC::DataCopy(p16, pg[static_cast<uint64_t>(c) * n], rows);
      AscendC::Duplicate(s_.vis, 0.0f, count);
      VecBarrier();
      mask_->Rows(s_.vis, *u_, r0_, c, cn, nv, t0);
      PipeSync<AscendC::HardEvent::MTE2_V>();
      AscendC::Cast(s_.p, p16, AscendC::RoundMode::CAST_NONE, count);
      PipeSync<AscendC::HardEvent::MTE3_V>();   // the last chunk's rows are out of the buffer
      AscendC::Duplicate(s_.out, 0.0f, cn * d);
      PipeSync<AscendC::HardEvent::V_S>();      // p and vis are read by the scalar unit
      for (int32_t j = 0; j < nv; ++j) {
        int32_t seen = 0;
        for (int32_t r = 0; r < cn; ++r) seen += s_.vis.GetValue(r * np_ + j) == 0.0f ? 1 : 0;
        if (seen == 0) continue;
        const AscendC::LocalTensor<float> v = conv_->ValueRows(t_, j, 1);
        for (int32_t r = 0; r < cn; ++r) {
          if (s_.vis.GetValue(r * np_ + j) != 0.0f) continue;
          AscendC::Muls(s_.tmp, v, s_.p.GetValue(r * np_ + j), d);
          VecBarrier();
          AscendC::Add(s_.out[r * d], s_.out[r * d], s_.tmp, d);
          VecBarrier();
        }
      }
      PipeSync<AscendC::HardEvent::V_MTE3>();
      AscendC::DataCopy(og[static_cast<uint64_t>(c) * d], s_.out, cn * d);
    }
    PipeSync<AscendC::HardEvent::MTE3_MTE2>();   // the accumulate reads the rows back
    PipeSync<AscendC::HardEvent::MTE3_V>();
  }

  const Args* a_ = nullptr;
  IfaMask* mask_ = nullptr;
  IfaConvert<QT, KT>* conv_ = nullptr;
  HiddenScratch<QT> s_;
  const Unit* u_ = nullptr;
  int32_t rows_ = 1, np_ = 64, out_rows_ = 2, r0_ = 0, t_ = 0;
};

}  // namespace ifa
}  // namespace dualops
