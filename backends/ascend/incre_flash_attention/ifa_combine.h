// Split-KV combine of IFA (after SyncAll on the vector cores): each output row merges its
// splits' fp32 partials (o_s, lse_s) with log-sum-exp weights, out = sum_s exp(lse_s - lse) o_s,
// lse = log sum_s exp(lse_s). Partials layout: docs/internals.md "IFA plan".
// Also the row writer shared with the unsplit path (out in q dtype + lse).
#pragma once
#include "ascend/incre_flash_attention/ifa_common.h"

namespace dualops {
namespace ifa {


// out[b, i, h, :] = row (cast to QT, round to nearest even); lse[b, h, i] = stage[0].
template <typename QT>
__aicore__ inline void WriteOutRow(const Args& a, AscendC::TBuf<AscendC::TPosition::VECCALC>& cast_buf,
                                   const AscendC::LocalTensor<float>& row, int32_t b, int32_t i, int32_t h, float lse,
                                   const AscendC::LocalTensor<float>& stage) {
  const int32_t d = a.t.head_dim;
  AscendC::LocalTensor<QT> oc = cast_buf.Get<QT>();
  VecBarrier();   // row was written by the vector unit
  AscendC::Cast(oc, row, AscendC::RoundMode::CAST_RINT, d);
  PipeSync<AscendC::HardEvent::V_MTE3>();
  AscendC::GlobalTensor<QT> out;
  out.SetGlobalBuffer(ascend::GmPtr<QT>(a.g.out));
  const int64_t off = static_cast<int64_t>(b) * a.p.out_stride_b + static_cast<int64_t>(i) * a.p.out_stride_s +
                      static_cast<int64_t>(h) * a.p.out_stride_h;
  AscendC::DataCopyPad(out[off], oc, AscendC::DataCopyExtParams(1, d * sizeof(QT), 0, 0, 0));
  AscendC::GlobalTensor<float> lg;
  lg.SetGlobalBuffer(ascend::GmPtr<float>(a.g.lse));
  const uint64_t li = (static_cast<uint64_t>(b) * a.t.h_q + h) * a.t.s_q + i;
  AscendC::DataCopyPad(lg[li], stage, AscendC::DataCopyExtParams(1, sizeof(float), 0, 0, 0));
  (void)lse;
}

template <typename QT>
class IfaCombine {
 public:
  __aicore__ inline void Init(const Args& a, AscendC::TPipe& pipe) {
    a_ = &a;
    const int32_t ns = a.t.num_splits, d = a.t.head_dim;
    pipe.InitBuffer(lse_, ns * 8 * sizeof(float));   // one 32-B block per split (strided gather)
    pipe.InitBuffer(w_, RoundUp(ns, 8) * sizeof(float));
    pipe.InitBuffer(o_, d * sizeof(float));
    pipe.InitBuffer(acc_, d * sizeof(float));
    pipe.InitBuffer(cast_, d * sizeof(QT));
    pipe.InitBuffer(stage_, 8 * sizeof(float));
  }

  __aicore__ inline void Run() {
    const Args& a = *a_;
    const int32_t ns = a.t.num_splits, d = a.t.head_dim, qr = a.t.q_rows;
    const int64_t workers = AscendC::GetBlockNum() * AscendC::GetTaskRation();
    const int64_t total = static_cast<int64_t>(a.t.batch) * a.t.h_kv * qr;
    const int64_t first = static_cast<int64_t>(a.t.whole_groups) * qr;   // whole groups: no partials
    AscendC::GlobalTensor<float> oa, la;
    oa.SetGlobalBuffer(ascend::GmPtr<float>(a.g.o_accum), static_cast<uint64_t>(total) * ns * d);
    la.SetGlobalBuffer(ascend::GmPtr<float>(a.g.lse_accum), static_cast<uint64_t>(total) * ns);
    AscendC::LocalTensor<float> lb = lse_.Get<float>();
    AscendC::LocalTensor<float> w = w_.Get<float>();
    AscendC::LocalTensor<float> ob = o_.Get<float>();
    AscendC::LocalTensor<float> acc = acc_.Get<float>();
    AscendC::LocalTensor<float> stage = stage_.Get<float>();
    for (int64_t row = first + AscendC::GetBlockIdx(); row < total; row += workers) {
      const int64_t bh = row / qr;
      const int32_t r = static_cast<int32_t>(row % qr);
      const int32_t b = static_cast<int32_t>(bh / a.t.h_kv), kvh = static_cast<int32_t>(bh % a.t.h_kv);
      const uint64_t base = static_cast<uint64_t>(bh) * ns * qr + r;   // split s at base + s * qr
      AscendC::DataCopyPad(lb, la[base],
                           AscendC::DataCopyExtParams(static_cast<uint16_t>(ns), sizeof(float),
                                                      static_cast<uint32_t>((qr - 1) * sizeof(float)), 0, 0),
                           AscendC::DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
      PipeSync<AscendC::HardEvent::MTE2_S>();
      // A NaN split poisons the row (never dropped); a split with max +inf gives lse +inf and
      // out NaN; splits that saw no key (lse -inf) add nothing -- the reference's semantics.
      float lmax = kNegInf;
      bool nan = false;
      for (int32_t s = 0; s < ns; ++s) {
        const float v = lb.GetValue(s * 8);
        if (v != v) nan = true;
        else lmax = v > lmax ? v : lmax;
      }
      float lse;
      AscendC::Duplicate(acc, nan || lmax == kPosInf ? kNaN : 0.0f, d);
      if (nan) {
        lse = kNaN;
      } else if (lmax == kNegInf || lmax == kPosInf) {
        lse = kPosInf;   // no split saw a key (out 0), or one saw a +inf score (out NaN)
      } else {
        for (int32_t s = 0; s < ns; ++s) w.SetValue(s, lb.GetValue(s * 8) - lmax);
        PipeSync<AscendC::HardEvent::S_V>();
        AscendC::Exp(w, w, ns);
        PipeSync<AscendC::HardEvent::V_S>();
        float sum = 0.0f;
        for (int32_t s = 0; s < ns; ++s) sum += w.GetValue(s);
        AscendC::Duplicate(stage, sum, 8);
        VecBarrier();
        AscendC::Ln(stage, stage, 8);
        PipeSync<AscendC::HardEvent::V_S>();
        lse = lmax + stage.GetValue(0);
        for (int32_t s = 0; s < ns; ++s) {
          const float ws = w.GetValue(s);
          // An empty split (lse -inf) adds nothing; a split whose weight underflows to 0 is still
          // merged, so a NaN in its partial poisons the row (0 * NaN), as in the reference.
          if (lb.GetValue(s * 8) == kNegInf) continue;
          AscendC::DataCopy(ob, oa[(base + static_cast<uint64_t>(s) * qr) * d], d);
          PipeSync<AscendC::HardEvent::MTE2_V>();
          AscendC::Muls(ob, ob, ws / sum, d);
          VecBarrier();
          AscendC::Add(acc, acc, ob, d);
          PipeSync<AscendC::HardEvent::V_MTE2>();
        }
      }
      int32_t i, h;
      RowCoords(a, kvh, r, i, h);
      PipeSync<AscendC::HardEvent::S_V>();
      AscendC::Duplicate(stage, lse, 8);
      WriteOutRow<QT>(a, cast_, acc, b, i, h, lse, stage);
      PipeSync<AscendC::HardEvent::MTE3_V>();
    }
  }

 private:
  const Args* a_ = nullptr;
  AscendC::TBuf<AscendC::TPosition::VECCALC> lse_, w_, o_, acc_, cast_, stage_;
};

}  // namespace ifa
}  // namespace dualops
