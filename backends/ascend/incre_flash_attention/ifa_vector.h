// The vector-core (AIV) side of IFA. The two vector cores of an AI core split the q rows of
// each tile. Per kv tile: scores from the S slot -> scale, + pse_shift, length / causal /
// atten_mask -> -inf, online softmax (running max m and sum l per row, sums of the fp32 P) -> P,
// rounded once to q's dtype, into the P slot; then,
// when the cube has P . V, acc = acc * exp(m_old - m_new) + O. After the last
// tile: out = acc / l, lse = m + ln(l) (or fp32 partials for split-KV, merged by ifa_combine.h).
#pragma once
#include "ascend/incre_flash_attention/ifa_combine.h"
#include "ascend/incre_flash_attention/ifa_common.h"
#include "ascend/incre_flash_attention/ifa_convert.h"
#include "ascend/incre_flash_attention/ifa_hidden.h"
#include "ascend/incre_flash_attention/ifa_mask.h"

namespace dualops {
namespace ifa {

template <typename QT, typename KT>
class IfaVector {
 public:
  __aicore__ inline void Init(const Args& a) {
    a_ = &a;
    const int32_t n = a.t.kv_tile, d = a.t.head_dim;
    np_ = RoundUp(n, 64);   // row pitch of scores in UB: whole 256-B repeats for Compare/Select
    rc_ = MaxI(1, static_cast<int32_t>(kScoreChunk) / np_);
    rc2_ = MaxI(1, static_cast<int32_t>(kOutChunk) / d);
    rows_aiv_ = RoundUp((a.t.q_tile_rows + 1) / 2, 8);
    const uint32_t score_elems = static_cast<uint32_t>(rc_ * np_);
    pipe_.InitBuffer(s_, score_elems * sizeof(float));
    pipe_.InitBuffer(res_, score_elems * sizeof(float));
    pipe_.InitBuffer(p_, score_elems * sizeof(QT));
    if (a.g.pse_shift != 0) pipe_.InitBuffer(pse_, score_elems * sizeof(float));
    mask_.Init(a, pipe_, np_, score_elems);
    const int32_t chunk_rows = RoundUp(MaxI(rc_, rc2_), 8);
    // m, l, corr[kSlots] per row of this core; chunk-local m_safe, diff, corr, ln vectors.
    pipe_.InitBuffer(stats_, ((2 + kSlots) * rows_aiv_ + 4 * chunk_rows) * sizeof(float));
    pipe_.InitBuffer(red_, (8 + RoundUp(2 * CeilDiv(MaxI(np_, d), 64), 8)) * sizeof(float));
    const uint32_t out_elems = static_cast<uint32_t>(rc2_ * d);
    pipe_.InitBuffer(o_, out_elems * sizeof(float));
    pipe_.InitBuffer(acc_, out_elems * sizeof(float));
    pipe_.InitBuffer(outc_, out_elems * sizeof(QT));
    pipe_.InitBuffer(div_, d * sizeof(float));
    pipe_.InitBuffer(stage_, 8 * sizeof(float));
    if (a.convert_kv) {
      conv_.Init(a, pipe_);
    } else if (IfaHidden<QT, KT>::Needed(a)) {
      conv_.InitLoader(a, pipe_);   // the hidden-key fix-up reads value rows through it
    }
    if (a.t.num_splits > 1) combine_.Init(a, pipe_);
    stats_m_ = stats_.Get<float>();
    stats_l_ = stats_m_[rows_aiv_];
    stats_corr_ = stats_m_[2 * rows_aiv_];
    chunk_ms_ = stats_m_[(2 + kSlots) * rows_aiv_];
    chunk_diff_ = chunk_ms_[chunk_rows];
    chunk_corr_ = chunk_ms_[2 * chunk_rows];
    chunk_ln_ = chunk_ms_[3 * chunk_rows];
    HiddenScratch<QT> hs;
    hs.vis = s_.Get<float>();
    hs.p = res_.Get<float>();
    hs.tmp = acc_.Get<float>();
    hs.out = o_.Get<float>();
    hs.red = red_.Get<float>();
    hs.stage = p_.Get<QT>();
    // O rows per fix-up step: P of the rows fits in res_, their O rows in o_.
    const int32_t hidden_rows = MaxI(1, MinI(rc_, MinI(rc2_, static_cast<int32_t>(out_elems) / np_)));
    hidden_.Init(a, &mask_, &conv_, hs, hidden_rows, np_, rc2_);
    VecBarrier();
  }

  __aicore__ inline void Process() {
    const Args& a = *a_;
    const int32_t core = static_cast<int32_t>(AscendC::GetBlockIdx() / AscendC::GetTaskRation());
    if (core < a.t.num_cores) {
      for (int32_t u = core; u < a.t.num_units; u += a.t.num_cores) {
        unit_.Decode(a, u);
        kloc_.Init(a, unit_.b, unit_.kvh);
        if ((a.convert_kv || IfaHidden<QT, KT>::Needed(a)) && unit_.tiles > 0) conv_.StartUnit(unit_);
        for (int32_t r0 = 0; r0 < a.t.q_rows; r0 += a.t.q_tile_rows) {
          RunPass(r0, MinI(a.t.q_tile_rows, a.t.q_rows - r0));
        }
      }
    }
    if (a.t.num_splits > 1) {
      AscendC::SyncAll();   // every split's partials are in GM
      combine_.Run();
    }
  }

 private:

  __aicore__ inline void RunPass(int32_t r0, int32_t mr) {
    const Args& a = *a_;
    // Vector core 0 takes the rows below half of a full q tile, core 1 the rest, in every pass:
    // a core's rows of the P / O slots never overlap the other core's rows of the next pass
    // (the hidden-key fix-up reads P back while the other core may be in the next pass).
    const int32_t half_rows = MinI((a.t.q_tile_rows + 1) / 2, mr);
    rs_ = AscendC::GetSubBlockIdx() == 0 ? 0 : half_rows;
    re_ = AscendC::GetSubBlockIdx() == 0 ? half_rows : mr;
    r0_ = r0;
    if (unit_.tiles == 0) {   // no key in this split: out 0 / lse +inf (partials: 0 / -inf)
      WriteEmpty();
      return;
    }
    PipeSync<AscendC::HardEvent::S_V>();   // the scalar unit wrote m / l of the last pass
    AscendC::Duplicate(stats_m_, kNegInf, rows_aiv_);
    AscendC::Duplicate(stats_l_, 0.0f, rows_aiv_);
    if (a.convert_kv) {
      conv_.ConvertTile(0);
      AscendC::CrossCoreSetFlag<2, PIPE_MTE3>(kFlagKvReady);
    }
    for (int32_t t = 0; t < unit_.tiles; ++t) {
      AscendC::CrossCoreWaitFlag(kFlagScoresReady);
      Softmax(t);
      AscendC::CrossCoreSetFlag<2, PIPE_MTE3>(kFlagProbsReady);
      if (t >= 1) {
        AscendC::CrossCoreWaitFlag(kFlagOutReady);
        hidden_.Run(unit_, r0_, rs_, re_, t - 1);
        Update(t - 1, false);
      }
      if (a.convert_kv && t + 1 < unit_.tiles) {
        conv_.ConvertTile(t + 1);   // its slot was freed by the mm2 of tile t - 1
        AscendC::CrossCoreSetFlag<2, PIPE_MTE3>(kFlagKvReady);
      }
    }
    AscendC::CrossCoreWaitFlag(kFlagOutReady);
    hidden_.Run(unit_, r0_, rs_, re_, unit_.tiles - 1);
    Update(unit_.tiles - 1, true);
  }

  __aicore__ inline void Softmax(int32_t t) {
    const Args& a = *a_;
    const int32_t n = a.t.kv_tile;
    const int32_t nv = unit_.TileKeys(a, t);
    const int32_t t0 = unit_.k0 + t * n;
    const int32_t slot = t % kSlots;
    AscendC::GlobalTensor<float> sg;
    sg.SetGlobalBuffer(a.Ws<float>(a.ws.s) + static_cast<uint64_t>(slot) * a.cube.rows_p * n,
                       static_cast<uint64_t>(a.cube.rows_p) * n);
    const uint64_t p_part = static_cast<uint64_t>(a.cube.rows_p) * n;
    AscendC::GlobalTensor<QT> pg;
    pg.SetGlobalBuffer(a.Ws<QT>(a.ws.p) + static_cast<uint64_t>(slot) * p_part, p_part);
    AscendC::LocalTensor<float> sb = s_.Get<float>();
    AscendC::LocalTensor<QT> p16 = p_.Get<QT>();
    const uint16_t gap_f32 = static_cast<uint16_t>((np_ - n) * 4 / 32);
    const uint16_t gap_q = static_cast<uint16_t>((np_ - n) * sizeof(QT) / 32);
    for (int32_t c = rs_; c < re_; c += rc_) {
      const int32_t cn = MinI(rc_, re_ - c);
      AscendC::DataCopy(sb, sg[static_cast<uint64_t>(c) * n],
                        AscendC::DataCopyParams(cn, static_cast<uint16_t>(n * 4 / 32), 0, gap_f32));
      PipeSync<AscendC::HardEvent::MTE2_V>();
      AscendC::Muls(sb, sb, a.p.softmax_scale, cn * np_);
      VecBarrier();
      if (a.g.pse_shift != 0) AddPse(sb, c, cn, nv, t0);
      mask_.Rows(sb, unit_, r0_, c, cn, nv, t0);
      OnlineSoftmax(sb, c, cn, slot);
      VecBarrier();
      AscendC::Cast(p16, sb, AscendC::RoundMode::CAST_RINT, static_cast<uint32_t>(cn * np_));
      PipeSync<AscendC::HardEvent::V_MTE3>();
      const AscendC::DataCopyParams rows(cn, static_cast<uint16_t>(n * sizeof(QT) / 32), gap_q, 0);
      AscendC::DataCopy(pg[static_cast<uint64_t>(c) * n], p16, rows);
      PipeSync<AscendC::HardEvent::MTE3_V>();
      PipeSync<AscendC::HardEvent::MTE3_MTE2>();
    }
  }

  __aicore__ inline void AddPse(const AscendC::LocalTensor<float>& sb, int32_t c, int32_t cn, int32_t nv, int32_t t0) {
    const Args& a = *a_;
    AscendC::GlobalTensor<float> g;
    g.SetGlobalBuffer(ascend::GmPtr<float>(a.g.pse_shift));
    AscendC::LocalTensor<float> pb = pse_.Get<float>();
    for (int32_t r = c; r < c + cn; ++r) {
      int32_t i, h;
      RowCoords(a, unit_.kvh, r0_ + r, i, h);
      const int64_t base = static_cast<int64_t>(unit_.b) * a.p.pse_stride_b + static_cast<int64_t>(h) * a.p.pse_stride_h +
                           static_cast<int64_t>(i) * a.p.pse_stride_q;
      if (a.p.pse_stride_k == 0) {   // broadcast along keys: one value for the row
        AscendC::Adds(sb[(r - c) * np_], sb[(r - c) * np_], g.GetValue(base), np_);
      } else {
        if (r == c) PipeSync<AscendC::HardEvent::V_MTE2>();   // the last chunk's Add read pb
        AscendC::DataCopyPad(pb[(r - c) * np_], g[base + static_cast<int64_t>(t0) * a.p.pse_stride_k],
                             AscendC::DataCopyExtParams(1, nv * sizeof(float), 0, 0, 0),
                             AscendC::DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
      }
    }
    if (a.p.pse_stride_k != 0) {
      PipeSync<AscendC::HardEvent::MTE2_V>();
      // Columns past nv hold stale UB; they are masked to -inf right after.
      AscendC::Add(sb, sb, pb, cn * np_);
    }
    VecBarrier();
  }

  // Rows [c, c + cn) of sb hold masked, scaled scores. Turns them into exp(s - m_new) and
  // updates m, l; corr = exp(m_old - m_new) is kept per row for this tile's slot.
  __aicore__ inline void OnlineSoftmax(const AscendC::LocalTensor<float>& sb, int32_t c, int32_t cn, int32_t slot) {
    AscendC::LocalTensor<float> red = red_.Get<float>();
    AscendC::LocalTensor<float> red_tmp = red[8];
    VecBarrier();
    for (int32_t r = 0; r < cn; ++r) {
      AscendC::ReduceMax(red, sb[r * np_], red_tmp, np_, false);
      PipeSync<AscendC::HardEvent::V_S>();
      const float tile_max = red.GetValue(0);
      const float m_old = stats_m_.GetValue(c - rs_ + r);
      // NaN propagates (a NaN score poisons the row, as in the reference).
      const float m_new = (tile_max != tile_max || m_old != m_old) ? tile_max + m_old
                                                                    : (tile_max > m_old ? tile_max : m_old);
      // A row with nothing visible yet keeps m = -inf; subtract 0 instead so exp gives 0, not NaN.
      const float m_safe = m_new == kNegInf ? 0.0f : m_new;
      stats_m_.SetValue(c - rs_ + r, m_new);
      chunk_ms_.SetValue(r, m_safe);
      chunk_diff_.SetValue(r, m_old - m_safe);
    }
    PipeSync<AscendC::HardEvent::S_V>();
    AscendC::Exp(chunk_corr_, chunk_diff_, cn);
    for (int32_t r = 0; r < cn; ++r) {
      PipeSync<AscendC::HardEvent::V_S>();
      const float m_safe = chunk_ms_.GetValue(r);
      AscendC::Adds(sb[r * np_], sb[r * np_], -m_safe, np_);
      VecBarrier();
      AscendC::Exp(sb[r * np_], sb[r * np_], np_);
      VecBarrier();
      AscendC::ReduceSum(red, sb[r * np_], red_tmp, np_);
      PipeSync<AscendC::HardEvent::V_S>();
      const float tile_sum = red.GetValue(0);
      const float corr = chunk_corr_.GetValue(r);
      const int32_t k = c - rs_ + r;
      stats_l_.SetValue(k, stats_l_.GetValue(k) * corr + tile_sum);
      stats_corr_.SetValue(slot * rows_aiv_ + k, corr);
    }
    PipeSync<AscendC::HardEvent::S_V>();
  }

  // acc = acc * corr + O for tile t; after the last tile, normalize and write out.
  __aicore__ inline void Update(int32_t t, bool last) {
    const Args& a = *a_;
    const int32_t d = a.t.head_dim;
    const int32_t slot = t % kSlots;
    AscendC::GlobalTensor<float> og, accg;
    og.SetGlobalBuffer(a.Ws<float>(a.ws.o) + static_cast<uint64_t>(slot) * a.cube.rows_p * d,
                       static_cast<uint64_t>(a.cube.rows_p) * d);
    accg.SetGlobalBuffer(a.Ws<float>(a.ws.acc), static_cast<uint64_t>(a.cube.rows_p) * d);
    AscendC::LocalTensor<float> ob = o_.Get<float>();
    AscendC::LocalTensor<float> ab = acc_.Get<float>();
    for (int32_t c = rs_; c < re_; c += rc2_) {
      const int32_t cn = MinI(rc2_, re_ - c);
      // ob / ab are rewritten: the last chunk's vector ops and output copies must be done.
      PipeSync<AscendC::HardEvent::V_MTE2>();
      PipeSync<AscendC::HardEvent::MTE3_MTE2>();
      AscendC::DataCopy(ob, og[static_cast<uint64_t>(c) * d], cn * d);
      AscendC::LocalTensor<float> acc = ob;
      if (t > 0) {
        AscendC::DataCopy(ab, accg[static_cast<uint64_t>(c) * d], cn * d);
        PipeSync<AscendC::HardEvent::MTE2_V>();
        for (int32_t r = 0; r < cn; ++r) {
          const float corr = stats_corr_.GetValue(slot * rows_aiv_ + c - rs_ + r);
          AscendC::Muls(ab[r * d], ab[r * d], corr, d);
        }
        VecBarrier();
        AscendC::Add(ab, ab, ob, cn * d);
        VecBarrier();
        acc = ab;
      } else {
        PipeSync<AscendC::HardEvent::MTE2_V>();
      }
      if (!last) {
        PipeSync<AscendC::HardEvent::V_MTE3>();
        AscendC::DataCopy(accg[static_cast<uint64_t>(c) * d], acc, cn * d);
        PipeSync<AscendC::HardEvent::MTE3_MTE2>();
        PipeSync<AscendC::HardEvent::MTE3_V>();
      } else {
        Finalize(acc, c, cn);
        PipeSync<AscendC::HardEvent::V_MTE2>();   // the next chunk's copies overwrite ob / ab
        PipeSync<AscendC::HardEvent::MTE3_MTE2>();
      }
    }
  }

  // Rows [c, c + cn): out = acc / l, lse = m + ln(l); a row with l == 0 saw no key (m -inf).
  // NaN (a NaN q, key, bias or scale) propagates to out and lse; a row whose max is +inf gets
  // lse +inf and out NaN, as in the reference.
  __aicore__ inline void Finalize(const AscendC::LocalTensor<float>& acc, int32_t c, int32_t cn) {
    const int32_t d = a_->t.head_dim;
    AscendC::LocalTensor<float> dv = div_.Get<float>();
    for (int32_t r = 0; r < cn; ++r) {
      const float l = stats_l_.GetValue(c - rs_ + r);
      chunk_ln_.SetValue(r, l == 0.0f ? 1.0f : l);
    }
    PipeSync<AscendC::HardEvent::S_V>();
    AscendC::Ln(chunk_ln_, chunk_ln_, cn);
    for (int32_t r = 0; r < cn; ++r) {
      PipeSync<AscendC::HardEvent::V_S>();
      const int32_t k = c - rs_ + r;
      const float l = stats_l_.GetValue(k);
      float lse;
      if (l != 0.0f) {
        AscendC::Duplicate(dv, l, d);
        VecBarrier();
        AscendC::Div(acc[r * d], acc[r * d], dv, d);
        VecBarrier();
        const float m = stats_m_.GetValue(k);
        lse = m == kPosInf ? kPosInf : m + chunk_ln_.GetValue(r);
      } else {
        AscendC::Duplicate(acc[r * d], 0.0f, d);
        lse = unit_.ns > 1 ? kNegInf : kPosInf;
      }
      WriteRow(acc[r * d], c + r, lse);
    }
  }

  __aicore__ inline void WriteEmpty() {
    const int32_t d = a_->t.head_dim;
    AscendC::LocalTensor<float> ab = acc_.Get<float>();
    AscendC::Duplicate(ab, 0.0f, d);
    VecBarrier();
    const float lse = unit_.ns > 1 ? kNegInf : kPosInf;
    for (int32_t r = rs_; r < re_; ++r) WriteRow(ab, r, lse);
  }

  // One finished row (pass-local row r) of this unit: out + lse, or the split's partials.
  __aicore__ inline void WriteRow(const AscendC::LocalTensor<float>& row, int32_t r, float lse) {
    const Args& a = *a_;
    const int32_t d = a.t.head_dim;
    const int32_t ur = r0_ + r;
    AscendC::LocalTensor<float> stage = stage_.Get<float>();
    PipeSync<AscendC::HardEvent::S_V>();
    AscendC::Duplicate(stage, lse, 8);
    if (unit_.ns > 1) {
      const uint64_t prow = (static_cast<uint64_t>(unit_.b * a.t.h_kv + unit_.kvh) * a.t.num_splits + unit_.split) *
                                a.t.q_rows + ur;
      AscendC::GlobalTensor<float> oa, la;
      oa.SetGlobalBuffer(ascend::GmPtr<float>(a.g.o_accum));
      la.SetGlobalBuffer(ascend::GmPtr<float>(a.g.lse_accum));
      PipeSync<AscendC::HardEvent::V_MTE3>();
      AscendC::DataCopy(oa[prow * d], row, d);
      AscendC::DataCopyPad(la[prow], stage, AscendC::DataCopyExtParams(1, sizeof(float), 0, 0, 0));
    } else {
      int32_t i, h;
      RowCoords(a, unit_.kvh, ur, i, h);
      WriteOutRow<QT>(a, outc_, row, unit_.b, i, h, lse, stage);
    }
    PipeSync<AscendC::HardEvent::MTE3_V>();
  }

  const Args* a_ = nullptr;
  Unit unit_;
  KeyLocator kloc_;
  int32_t np_ = 0, rc_ = 1, rc2_ = 1, rows_aiv_ = 8;
  int32_t rs_ = 0, re_ = 0, r0_ = 0;
  AscendC::TPipe pipe_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> s_, res_, p_, pse_, stats_, red_, o_, acc_, outc_, div_, stage_;
  AscendC::LocalTensor<float> stats_m_, stats_l_, stats_corr_, chunk_ms_, chunk_diff_, chunk_corr_, chunk_ln_;
  IfaConvert<QT, KT> conv_;
  IfaMask mask_;
  IfaHidden<QT, KT> hidden_;
  IfaCombine<QT> combine_;
};

}  // namespace ifa
}  // namespace dualops
