// The vector-core (AIV) side of MLA decode. The two vector cores of an AI core split each pass's
// q rows. Per kv tile: scores from the S slot -> scale, invalid / causal keys -> -inf, online
// softmax (running max m and sum l per row) -> P, rounded once to q's dtype, into the P slot;
// when the cube has P . V: acc = acc * exp(m_old - m_new) + O, acc resident in UB. After the last
// tile out = acc / l, lse = m + ln l (with the attention sink), or the split's fp32 partials.
// FP8 caches: the tile's keys are dequantized into the workspace first (mla_dequant.h).
#pragma once
#include "ascend/mla_decode/mla_combine.h"
#include "ascend/mla_decode/mla_common.h"
#include "ascend/mla_decode/mla_dequant.h"

namespace dualops {
namespace mla {

template <typename QT>
class MlaVector {
 public:
  static constexpr int32_t kMaxRows = 32;   // rows of one vector core (m_rows <= 64)

  __aicore__ inline void Init(const Args& a) {
    a_ = &a;
    tp_ = &pipe_;
    const int32_t n = a.h.kv_tile, dv = a.h.d_v;
    pipe_.InitBuffer(s_, kMaxRows * n * sizeof(float));
    pipe_.InitBuffer(res_, kMaxRows * n * sizeof(float));
    pipe_.InitBuffer(p_, kMaxRows * n * sizeof(QT));
    pipe_.InitBuffer(acc_, kMaxRows * dv * sizeof(float));
    pipe_.InitBuffer(o_, kOutChunkRows * dv * sizeof(float));
    pipe_.InitBuffer(col_, n * sizeof(float));
    pipe_.InitBuffer(keymask_, n * sizeof(float));
    pipe_.InitBuffer(bits_, RoundUp(n / 8, 32));
    // m, l, corr[kSlots], exp(m_old - m_new) inputs / outputs, ln(l), divisors per row.
    pipe_.InitBuffer(stats_, (6 + kSlots) * kMaxRows * sizeof(float));
    pipe_.InitBuffer(red_, (8 + RoundUp(2 * CeilDiv(MaxI(n, dv), 64), 8)) * sizeof(float));
    writer_.Init(a, pipe_);
    if (a.h.convert) deq_.Init(a, pipe_);
    if (a.t.total_splits > a.t.batch) combine_.Init(a, pipe_, &writer_);
    AscendC::LocalTensor<float> st = stats_.Get<float>();
    m_ = st;
    l_ = st[kMaxRows];
    diff_ = st[2 * kMaxRows];
    corr_now_ = st[3 * kMaxRows];
    ln_ = st[4 * kMaxRows];
    corr_ = st[6 * kMaxRows];
    AscendC::CreateVecIndex(col_.Get<float>(), 0.0f, n);
    AscendC::PipeBarrier<PIPE_V>();
  }

  __aicore__ inline void Process() {
    const Args& a = *a_;
    const int32_t core = static_cast<int32_t>(AscendC::GetBlockIdx() / AscendC::GetTaskRation());
    if (core < a.h.num_cores) ForEachPass(a, core, *this);
    if (a.t.total_splits > a.t.batch) {
      AscendC::SyncAll();   // every split's partials are in GM
      combine_.Run();
    }
  }

  __aicore__ inline void OnPass(const Pass& ps) {
    const Args& a = *a_;
    ps_ = ps;
    // Dense passes: vector core 0 takes the rows below half of the first m block, core 1 the
    // rest, in every pass (only a shorter last block splits unevenly), so a core's rows of the
    // P / O slots never overlap the other core's rows of its next pass (DropHiddenKeys reads P
    // back while the other core may be there already).
    const int32_t mr = ps.r1 - ps.r0;
    const int32_t half_rows = a.t.sparse ? (mr + 1) / 2 : MinI((MinI(a.h.m_rows, a.t.q_rows) + 1) / 2, mr);
    rs_ = AscendC::GetSubBlockIdx() == 0 ? 0 : half_rows;
    re_ = AscendC::GetSubBlockIdx() == 0 ? half_rows : mr;
    if (ps.tiles == 0) {
      WriteEmpty();
      return;
    }
    kmap_.Init(a, ps);
    for (int32_t r = 0; r < kMaxRows; ++r) {
      m_.SetValue(r, kNegInf);
      l_.SetValue(r, 0.0f);
    }
    if (a.h.convert) {
      deq_.ConvertTile(ps, kmap_, 0);
      AscendC::CrossCoreSetFlag<2, PIPE_MTE3>(kFlagKvReady);
    }
    for (int32_t t = 0; t < ps.tiles; ++t) {
      AscendC::CrossCoreWaitFlag(kFlagTileReady);   // S of tile t, O of tile t - 1
      // Before tile t + 1's dequantization takes tile t - 1's workspace slot.
      if (t >= 1) DropHiddenKeys(t - 1);
      Softmax(t);
      // A dequantized cache: tile t + 1 goes with P of tile t (its slot was last read by the
      // cube's load of tile t - 1), so the cube waits once per tile.
      if (a.h.convert && t + 1 < ps.tiles) deq_.ConvertTile(ps, kmap_, t + 1);
      AscendC::CrossCoreSetFlag<2, PIPE_MTE3>(kFlagProbsReady);
      if (t >= 1) Update(t - 1);
    }
    AscendC::CrossCoreWaitFlag(kFlagTileReady);   // O of the last tile
    DropHiddenKeys(ps.tiles - 1);
    Update(ps.tiles - 1);
    Finalize();
  }

 private:
  // Scores of tile t for rows [rs, re): scale, mask, online softmax, P to the workspace. The row
  // sums l add the fp32 P; the cube gets P rounded once to q's dtype (docs/parity.md).
  __aicore__ inline void Softmax(int32_t t) {
    const Args& a = *a_;
    const int32_t n = a.h.kv_tile, cn = re_ - rs_;
    if (cn <= 0) return;
    const int32_t nv = ps_.TileKeys(n, t), t0 = ps_.k0 + t * n;
    const uint64_t slot = static_cast<uint64_t>(t % kSlots);
    AscendC::GlobalTensor<float> sg;
    sg.SetGlobalBuffer(a.Ws<float>(a.ws.s) + slot * a.c.rows_p * n, static_cast<uint64_t>(a.c.rows_p) * n);
    const uint64_t p_part = static_cast<uint64_t>(a.c.rows_p) * n;
    AscendC::GlobalTensor<QT> pg;
    pg.SetGlobalBuffer(a.Ws<QT>(a.ws.p) + slot * p_part, p_part);
    AscendC::LocalTensor<float> sb = s_.Get<float>();
    AscendC::LocalTensor<QT> p16 = p_.Get<QT>();
    const int32_t count = cn * n;
    AscendC::DataCopy(sb, sg[static_cast<uint64_t>(rs_) * n], count);
    if (a.t.sparse) BuildKeyMask(nv, t0);
    PipeSync<AscendC::HardEvent::MTE2_V>(tp_);
    AscendC::Muls(sb, sb, a.p.softmax_scale, count);
    AscendC::PipeBarrier<PIPE_V>();
    AscendC::LocalTensor<float> col = col_.Get<float>();
    AscendC::LocalTensor<uint8_t> bits = bits_.Get<uint8_t>();
    for (int32_t r = 0; r < cn; ++r) {
      AscendC::LocalTensor<float> row = sb[r * n];
      if (a.t.sparse) {   // invalid entries and keys past the tile's valid ones -> -inf
        AscendC::Add(row, row, keymask_.Get<float>(), n);
        continue;
      }
      const int32_t limit = a.p.causal ? RowLimit(r) : ps_.kv_len;
      const int32_t hi = MinI(nv, limit - t0);
      if (hi <= 0) {
        AscendC::Duplicate(row, kNegInf, n);
      } else if (hi < n) {
        AscendC::CompareScalar(bits, col, static_cast<float>(hi), AscendC::CMPMODE::LT, n);
        AscendC::PipeBarrier<PIPE_V>();
        AscendC::Select(row, bits, row, kNegInf, AscendC::SELMODE::VSEL_TENSOR_SCALAR_MODE, n);
        AscendC::PipeBarrier<PIPE_V>();
      }
    }
    AscendC::PipeBarrier<PIPE_V>();
    OnlineSoftmax(sb, cn, static_cast<int32_t>(slot));
    AscendC::Cast(p16, sb, AscendC::RoundMode::CAST_RINT, count);
    PipeSync<AscendC::HardEvent::V_MTE3>(tp_);
    AscendC::DataCopy(pg[static_cast<uint64_t>(rs_) * n], p16, count);
    PipeSync<AscendC::HardEvent::MTE3_V>(tp_);
    PipeSync<AscendC::HardEvent::MTE3_MTE2>(tp_);
  }

  // keymask[j] = 0 for a valid key j of the tile, -inf otherwise (sparse decode).
  __aicore__ inline void BuildKeyMask(int32_t nv, int32_t t0) {
    AscendC::LocalTensor<float> km = keymask_.Get<float>();
    PipeSync<AscendC::HardEvent::V_S>(tp_);
    for (int32_t j = 0; j < a_->h.kv_tile;) {
      int32_t pool, run = 1;
      const bool ok = j < nv && kmap_.Row(t0 + j, 1, pool, run) >= 0;
      km.SetValue(j, ok ? 0.0f : kNegInf);
      j += run;
    }
    PipeSync<AscendC::HardEvent::S_V>(tp_);
  }

  // Rows of sb hold masked, scaled scores: turn them into exp(s - m_new), update m and l, keep
  // corr = exp(m_old - m_new) for this tile's slot. A row with nothing visible yet keeps
  // m = -inf and subtracts 0 (exp gives 0, not NaN). A row with a +inf score keeps m = +inf and
  // subtracts 0 too, like torch.logsumexp: l becomes +inf (lse +inf) and P holds inf (out NaN,
  // inf / inf), unless a NaN score makes l NaN. NaN scores keep NaN in l and P.
  __aicore__ inline void OnlineSoftmax(const AscendC::LocalTensor<float>& sb, int32_t cn, int32_t slot) {
    const int32_t n = a_->h.kv_tile;
    AscendC::LocalTensor<float> red = red_.Get<float>();
    AscendC::LocalTensor<float> red_tmp = red[8];
    for (int32_t r = 0; r < cn; ++r) {
      AscendC::ReduceMax(red, sb[r * n], red_tmp, n, false);
      PipeSync<AscendC::HardEvent::V_S>(tp_);
      const float tile_max = red.GetValue(0);
      const float m_old = m_.GetValue(r);
      const float m_new = tile_max > m_old ? tile_max : m_old;
      const float m_safe = (m_new == kNegInf || m_new == kPosInf) ? 0.0f : m_new;
      m_.SetValue(r, m_new);
      ln_.SetValue(r, m_safe);
      diff_.SetValue(r, m_old - m_safe);
    }
    PipeSync<AscendC::HardEvent::S_V>(tp_);
    AscendC::Exp(corr_now_, diff_, cn);
    for (int32_t r = 0; r < cn; ++r) {
      PipeSync<AscendC::HardEvent::V_S>(tp_);
      const float m_safe = ln_.GetValue(r);
      PipeSync<AscendC::HardEvent::S_V>(tp_);
      AscendC::Adds(sb[r * n], sb[r * n], -m_safe, n);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Exp(sb[r * n], sb[r * n], n);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::ReduceSum(red, sb[r * n], red_tmp, n);
      PipeSync<AscendC::HardEvent::V_S>(tp_);
      const float tile_sum = red.GetValue(0);
      const float corr = corr_now_.GetValue(r);
      l_.SetValue(r, l_.GetValue(r) * corr + tile_sum);
      corr_.SetValue(slot * kMaxRows + r, corr);
    }
    PipeSync<AscendC::HardEvent::S_V>(tp_);
  }

  // Causal S_q > 1: the keys of tile t at or past a row's limit are hidden from that row. Their
  // P is 0, but the cube's O = P . V would still take 0 * NaN or 0 * inf from a non-finite value
  // of such a key, and a masked key must have no effect. So the values of the keys hidden from
  // some of this core's rows are checked (the only cost in the common case); if one is not
  // finite, the O rows of the rows hiding keys are recomputed here from P and the values of the
  // keys each row sees, and replace the cube's rows in the O slot before Update reads them.
  // A core reads only its own rows of P and O, and values from the cache itself (dequantized
  // here for FP8 caches, not taken from the workspace slot the other vector core refills with
  // tile t + 2 meanwhile), so nothing here waits for the other vector core.
  __aicore__ inline void DropHiddenKeys(int32_t t) {
    const Args& a = *a_;
    if (!a.p.causal || a.t.s_q <= 1 || a.t.sparse || re_ <= rs_) return;
    const int32_t n = a.h.kv_tile, nv = ps_.TileKeys(n, t), t0 = ps_.k0 + t * n;
    const int32_t first = RowLimit(0) - t0;   // the core's first row hides the most keys
    if (first >= nv) return;
    AscendC::PipeBarrier<PIPE_V>();
    if (HiddenValuesFinite(t, MaxI(first, 0), nv)) {
      PipeSync<AscendC::HardEvent::V_MTE2>(tp_);
      return;
    }
    RecomputeO(t, nv, t0);
    PipeSync<AscendC::HardEvent::V_MTE2>(tp_);
  }

  // Whether the values of keys [j0, nv) of tile t are all finite (sum of v - v: 0 or NaN).
  __aicore__ inline bool HiddenValuesFinite(int32_t t, int32_t j0, int32_t nv) {
    const int32_t dv = a_->h.d_v;
    AscendC::LocalTensor<float> chk = o_.Get<float>();
    AscendC::LocalTensor<float> tmp = chk[dv];
    AscendC::LocalTensor<float> v = s_.Get<float>();
    AscendC::LocalTensor<float> red = red_.Get<float>();
    AscendC::Duplicate(chk, 0.0f, dv);
    for (int32_t j = j0; j < nv; ++j) {
      LoadValue(t, j, v);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Sub(tmp, v, v, dv);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Add(chk, chk, tmp, dv);
    }
    AscendC::PipeBarrier<PIPE_V>();
    AscendC::ReduceSum(red, chk, red[8], dv);
    PipeSync<AscendC::HardEvent::V_S>(tp_);
    return red.GetValue(0) == 0.0f;
  }

  // O rows of tile t for this core's rows that hide keys: sum of p * v over the keys each sees.
  __aicore__ inline void RecomputeO(int32_t t, int32_t nv, int32_t t0) {
    const Args& a = *a_;
    const int32_t n = a.h.kv_tile, dv = a.h.d_v;
    int32_t ra = 0;   // rows [0, ra) hide some key (limits grow with the row)
    while (ra < re_ - rs_ && RowLimit(ra) - t0 < nv) ++ra;
    const uint64_t slot = static_cast<uint64_t>(t % kSlots), p_part = static_cast<uint64_t>(a.c.rows_p) * n;
    AscendC::GlobalTensor<QT> pg;
    pg.SetGlobalBuffer(a.Ws<QT>(a.ws.p) + slot * p_part, p_part);
    AscendC::GlobalTensor<float> og;
    og.SetGlobalBuffer(a.Ws<float>(a.ws.o) + slot * a.c.rows_p * dv, static_cast<uint64_t>(a.c.rows_p) * dv);
    AscendC::LocalTensor<QT> p16 = p_.Get<QT>();
    AscendC::LocalTensor<float> p = res_.Get<float>();
    AscendC::LocalTensor<float> v = s_.Get<float>();
    AscendC::LocalTensor<float> w = v[2 * dv];
    AscendC::LocalTensor<float> ob = o_.Get<float>();
    const int32_t count = ra * n;
    PipeSync<AscendC::HardEvent::V_MTE2>(tp_);
    AscendC::DataCopy(p16, pg[static_cast<uint64_t>(rs_) * n], count);
    PipeSync<AscendC::HardEvent::MTE2_V>(tp_);
    AscendC::Cast(p, p16, AscendC::RoundMode::CAST_NONE, count);
    PipeSync<AscendC::HardEvent::V_S>(tp_);   // p is read by the scalar unit
    for (int32_t c = 0; c < ra; c += kOutChunkRows) {
      const int32_t k = MinI(kOutChunkRows, ra - c);
      PipeSync<AscendC::HardEvent::MTE3_V>(tp_);   // the previous chunk's rows are out of ob
      AscendC::Duplicate(ob, 0.0f, k * dv);
      int32_t r0 = 0;   // rows [r0, k) of the chunk see key j
      for (int32_t j = 0; j < nv; ++j) {
        while (r0 < k && RowLimit(c + r0) - t0 <= j) ++r0;
        if (r0 == k) break;
        LoadValue(t, j, v);
        for (int32_t r = r0; r < k; ++r) {
          AscendC::PipeBarrier<PIPE_V>();
          AscendC::Muls(w, v, p.GetValue((c + r) * n + j), dv);
          AscendC::PipeBarrier<PIPE_V>();
          AscendC::Add(ob[r * dv], ob[r * dv], w, dv);
        }
      }
      PipeSync<AscendC::HardEvent::V_MTE3>(tp_);
      AscendC::DataCopy(og[static_cast<uint64_t>(rs_ + c) * dv], ob, k * dv);
    }
    PipeSync<AscendC::HardEvent::MTE3_MTE2>(tp_);   // Update reads the rows back
    PipeSync<AscendC::HardEvent::MTE3_V>(tp_);
  }

  // The first d_v values of key j of tile t as fp32 in v[0, d_v) (v[d_v, 2 d_v) is scratch): from
  // the cache, dequantized for FP8 caches.
  __aicore__ inline void LoadValue(int32_t t, int32_t j, const AscendC::LocalTensor<float>& v) {
    const Args& a = *a_;
    const int32_t d = a.h.d_qk, dv = a.h.d_v;
    if (a.h.convert) {
      deq_.ValueRow(ps_, kmap_, t, j, v, dv);
      return;
    }
    AscendC::LocalTensor<QT> hi = p_.Get<QT>();
    AscendC::GlobalTensor<QT> g;
    PipeSync<AscendC::HardEvent::V_MTE2>(tp_);   // the previous key's cast has read the staging
    int32_t pool, run;
    const int64_t row = kmap_.Row(ps_.k0 + t * a.h.kv_tile + j, 1, pool, run);
    g.SetGlobalBuffer(Gm<QT>(a.p.kv_cache));
    AscendC::DataCopy(hi, g[row * d], dv);
    PipeSync<AscendC::HardEvent::MTE2_V>(tp_);
    AscendC::Cast(v, hi, AscendC::RoundMode::CAST_NONE, dv);
  }

  // Causal limit of this core's row r: it sees the keys at positions below it.
  __aicore__ inline int32_t RowLimit(int32_t r) const {
    return ps_.kv_len - a_->t.s_q + (ps_.r0 + rs_ + r) / a_->t.h_q + 1;
  }

  // acc = acc * corr + O for tile t (acc = O for the pass's first tile).
  __aicore__ inline void Update(int32_t t) {
    const Args& a = *a_;
    const int32_t dv = a.h.d_v, slot = t % kSlots;
    AscendC::GlobalTensor<float> og;
    og.SetGlobalBuffer(a.Ws<float>(a.ws.o) + static_cast<uint64_t>(slot) * a.c.rows_p * dv,
                       static_cast<uint64_t>(a.c.rows_p) * dv);
    AscendC::LocalTensor<float> acc = acc_.Get<float>();
    AscendC::LocalTensor<float> ob = o_.Get<float>();
    for (int32_t c = 0; c < re_ - rs_; c += kOutChunkRows) {
      const int32_t cn = MinI(kOutChunkRows, re_ - rs_ - c);
      if (t == 0) {
        AscendC::DataCopy(acc[c * dv], og[static_cast<uint64_t>(rs_ + c) * dv], cn * dv);
        PipeSync<AscendC::HardEvent::MTE2_V>(tp_);
        continue;
      }
      AscendC::DataCopy(ob, og[static_cast<uint64_t>(rs_ + c) * dv], cn * dv);
      PipeSync<AscendC::HardEvent::MTE2_V>(tp_);
      for (int32_t r = 0; r < cn; ++r) {
        AscendC::Muls(acc[(c + r) * dv], acc[(c + r) * dv], corr_.GetValue(slot * kMaxRows + c + r), dv);
      }
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Add(acc[c * dv], acc[c * dv], ob, cn * dv);
      PipeSync<AscendC::HardEvent::V_MTE2>(tp_);
    }
    AscendC::PipeBarrier<PIPE_V>();
  }

  // out = acc / l, lse = m + ln l. l == 0: no key the rows attend has a score above -inf; out is
  // acc as it is (P = 0: 0, or NaN in a channel where an attended value is not finite, like the
  // reference's 0 * inf) and lse +inf, or -inf as a partial.
  __aicore__ inline void Finalize() {
    const Args& a = *a_;
    const int32_t dv = a.h.d_v, cn = re_ - rs_;
    if (cn <= 0) return;
    AscendC::LocalTensor<float> acc = acc_.Get<float>();
    for (int32_t r = 0; r < cn; ++r) {
      const float l = l_.GetValue(r);
      ln_.SetValue(r, l == 0.0f ? 1.0f : l);
    }
    PipeSync<AscendC::HardEvent::S_V>(tp_);
    AscendC::Ln(diff_, ln_, cn);
    AscendC::Reciprocal(corr_now_, ln_, cn);
    PipeSync<AscendC::HardEvent::V_S>(tp_);
    float lse[kMaxRows];
    for (int32_t r = 0; r < cn; ++r) {
      const float l = l_.GetValue(r);
      if (l == 0.0f) {   // acc = sum of 0 * v: 0, NaN where an attended value is not finite
        lse[r] = ps_.ns > 1 ? kNegInf : kPosInf;
      } else {
        AscendC::Muls(acc[r * dv], acc[r * dv], corr_now_.GetValue(r), dv);
        lse[r] = m_.GetValue(r) + diff_.GetValue(r);
      }
    }
    AscendC::PipeBarrier<PIPE_V>();
    WriteRows(acc, cn, lse);
  }

  __aicore__ inline void WriteRows(const AscendC::LocalTensor<float>& rows, int32_t cn, const float* lse) {
    const int32_t dv = a_->h.d_v;
    for (int32_t c = 0; c < cn; c += kOutChunkRows) {
      const int32_t k = MinI(kOutChunkRows, cn - c);
      const int32_t row = ps_.r0 + rs_ + c;
      if (ps_.ns > 1) {
        writer_.Partial(rows[c * dv], ps_.slot, row, k, lse + c);
      } else {
        writer_.Final(rows[c * dv], ps_.b, row, k, lse + c);
      }
    }
  }

  __aicore__ inline void WriteEmpty() {
    const int32_t dv = a_->h.d_v, cn = re_ - rs_;
    if (cn <= 0) return;
    AscendC::LocalTensor<float> acc = acc_.Get<float>();
    PipeSync<AscendC::HardEvent::MTE3_V>(tp_);
    AscendC::Duplicate(acc, 0.0f, cn * dv);
    AscendC::PipeBarrier<PIPE_V>();
    float lse[kMaxRows];
    for (int32_t r = 0; r < cn; ++r) lse[r] = ps_.ns > 1 ? kNegInf : kPosInf;
    WriteRows(acc, cn, lse);
  }

  const Args* a_ = nullptr;
  AscendC::TPipe* tp_ = nullptr;
  Pass ps_;
  KeyMap kmap_;
  int32_t rs_ = 0, re_ = 0;
  AscendC::TPipe pipe_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> s_, res_, p_, acc_, o_, col_, keymask_, bits_, stats_, red_;
  AscendC::LocalTensor<float> m_, l_, diff_, corr_now_, ln_, corr_;
  MlaRowWriter<QT> writer_;
  MlaDequant<QT> deq_;
  MlaCombine<QT> combine_;
};

}  // namespace mla
}  // namespace dualops
