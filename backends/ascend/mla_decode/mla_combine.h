// Row writers of MLA decode on the vector cores (out + lse with the attention sink, or a split's
// fp32 partials) and the split-KV combine that runs after SyncAll: every row of a request with
// several splits merges its partials with log-sum-exp weights, out = sum_s exp(lse_s - lse) o_s,
// lse = log sum_s exp(lse_s). A split holding NaN poisons the merged row; a split that saw no key
// (lse -inf) adds 0 times its partial (0, or NaN from a non-finite value it attends); no score
// above -inf at all gives lse +inf and out the sum of the partials (0 unless such a NaN).
#pragma once
#include "ascend/mla_decode/mla_common.h"

namespace dualops {
namespace mla {

template <typename QT>
class MlaRowWriter {
 public:
  __aicore__ inline void Init(const Args& a, AscendC::TPipe& pipe) {
    a_ = &a;
    tp_ = &pipe;
    pipe.InitBuffer(cast_, kOutChunkRows * a.h.d_v * sizeof(QT));
    pipe.InitBuffer(stage_, 8 * sizeof(float));
    if (a.p.attn_sink != nullptr) sink_.SetGlobalBuffer(Gm<float>(a.p.attn_sink), a.t.h_q);
  }

  // q rows [row, row + cn) of request b, finished: rows[r * d_v] (fp32, scaled in place by the
  // sink factor), lse[r]. Writes out (q dtype) and lse.
  __aicore__ inline void Final(const AscendC::LocalTensor<float>& rows, int32_t b, int32_t row, int32_t cn,
                               const float* lse) {
    const Args& a = *a_;
    const int32_t dv = a.h.d_v;
    AscendC::LocalTensor<float> stage = stage_.Get<float>();
    if (a.p.attn_sink != nullptr) {
      for (int32_t r = 0; r < cn; ++r) {
        if (lse[r] == kPosInf) continue;   // no key: out is 0 whatever the sink
        const float sink = sink_.GetValue((row + r) % a.t.h_q);
        // factor = exp(lse) / (exp(lse) + exp(sink)) = 1 / (1 + exp(sink - lse))
        PipeSync<AscendC::HardEvent::S_V>(tp_);
        AscendC::Duplicate(stage, sink - lse[r], 8);
        AscendC::PipeBarrier<PIPE_V>();
        AscendC::Exp(stage, stage, 8);
        PipeSync<AscendC::HardEvent::V_S>(tp_);
        const float factor = 1.0f / (1.0f + stage.GetValue(0));
        AscendC::Muls(rows[r * dv], rows[r * dv], factor, dv);
      }
      AscendC::PipeBarrier<PIPE_V>();
    }
    AscendC::LocalTensor<QT> oc = cast_.Get<QT>();
    AscendC::Cast(oc, rows, AscendC::RoundMode::CAST_RINT, cn * dv);
    PipeSync<AscendC::HardEvent::V_MTE3>(tp_);
    AscendC::GlobalTensor<QT> out;
    out.SetGlobalBuffer(Gm<QT>(a.p.out));
    // out is [B, S_q, H_q, d_v] contiguous: row i * h_q + h of request b is row b * q_rows + row.
    AscendC::DataCopy(out[(static_cast<uint64_t>(b) * a.t.q_rows + row) * dv], oc, cn * dv);
    AscendC::GlobalTensor<float> lg;
    lg.SetGlobalBuffer(Gm<float>(a.p.lse));
    for (int32_t r = 0; r < cn; ++r) {
      const int32_t i = (row + r) / a.t.h_q, h = (row + r) % a.t.h_q;
      PipeSync<AscendC::HardEvent::MTE3_S>(tp_);
      stage.SetValue(0, lse[r]);
      PipeSync<AscendC::HardEvent::S_MTE3>(tp_);
      AscendC::DataCopyPad(lg[(static_cast<uint64_t>(b) * a.t.h_q + h) * a.t.s_q + i], stage,
                           AscendC::DataCopyExtParams(1, sizeof(float), 0, 0, 0));
    }
    PipeSync<AscendC::HardEvent::MTE3_V>(tp_);
    PipeSync<AscendC::HardEvent::MTE3_S>(tp_);
  }

  // A split's partial rows: o_accum[(slot * q_rows + row) * d_v], lse_accum[slot * q_rows + row].
  __aicore__ inline void Partial(const AscendC::LocalTensor<float>& rows, int32_t slot, int32_t row, int32_t cn,
                                 const float* lse) {
    const Args& a = *a_;
    const int32_t dv = a.h.d_v;
    const uint64_t first = static_cast<uint64_t>(slot) * a.t.q_rows + row;
    AscendC::GlobalTensor<float> oa, la;
    oa.SetGlobalBuffer(Gm<float>(a.p.o_accum));
    la.SetGlobalBuffer(Gm<float>(a.p.lse_accum));
    PipeSync<AscendC::HardEvent::V_MTE3>(tp_);
    AscendC::DataCopy(oa[first * dv], rows, cn * dv);
    AscendC::LocalTensor<float> stage = stage_.Get<float>();
    for (int32_t r = 0; r < cn; ++r) {
      PipeSync<AscendC::HardEvent::MTE3_S>(tp_);
      stage.SetValue(0, lse[r]);
      PipeSync<AscendC::HardEvent::S_MTE3>(tp_);
      AscendC::DataCopyPad(la[first + r], stage, AscendC::DataCopyExtParams(1, sizeof(float), 0, 0, 0));
    }
    PipeSync<AscendC::HardEvent::MTE3_V>(tp_);
    PipeSync<AscendC::HardEvent::MTE3_S>(tp_);
  }

 private:
  const Args* a_ = nullptr;
  AscendC::TPipe* tp_ = nullptr;
  AscendC::GlobalTensor<float> sink_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> cast_, stage_;
};

template <typename QT>
class MlaCombine {
 public:
  __aicore__ inline void Init(const Args& a, AscendC::TPipe& pipe, MlaRowWriter<QT>* writer) {
    a_ = &a;
    tp_ = &pipe;
    writer_ = writer;
    const int32_t ns = MaxSplits(a);
    ns_max_ = ns;
    pipe.InitBuffer(lse_, ns * 8 * sizeof(float));   // one 32-B block per split (strided gather)
    pipe.InitBuffer(w_, RoundUp(ns, 8) * sizeof(float));
    pipe.InitBuffer(o_, a.h.d_v * sizeof(float));
    pipe.InitBuffer(acc_, a.h.d_v * sizeof(float));
  }

  // The largest split count of any request (bounds the UB gather of one row's partials).
  __aicore__ static inline int32_t MaxSplits(const Args& a) {
    int32_t m = 1;
    for (int32_t r = 0; r < a.t.batch; ++r) m = MaxI(m, a.Splits(r));
    return m;
  }

  __aicore__ inline void Run() {
    const Args& a = *a_;
    const int32_t qr = a.t.q_rows, dv = a.h.d_v;
    const int64_t workers = static_cast<int64_t>(a.h.num_cores) * AscendC::GetTaskRation();
    AscendC::GlobalTensor<float> oa, la;
    oa.SetGlobalBuffer(Gm<float>(a.p.o_accum), static_cast<uint64_t>(a.t.total_splits) * qr * dv);
    la.SetGlobalBuffer(Gm<float>(a.p.lse_accum), static_cast<uint64_t>(a.t.total_splits) * qr);
    AscendC::LocalTensor<float> lb = lse_.Get<float>();
    AscendC::LocalTensor<float> w = w_.Get<float>();
    AscendC::LocalTensor<float> ob = o_.Get<float>();
    AscendC::LocalTensor<float> acc = acc_.Get<float>();
    int64_t item = 0;   // (request with splits, row) pairs in order, dealt round-robin
    for (int32_t b = 0; b < a.t.batch; ++b) {
      const int32_t ns = a.Splits(b);
      if (ns <= 1) continue;
      const int32_t slot0 = a.num_splits.GetValue(b);
      for (int32_t row = 0; row < qr; ++row, ++item) {
        if (item % workers != AscendC::GetBlockIdx()) continue;
        const uint64_t base = static_cast<uint64_t>(slot0) * qr + row;   // split s at base + s * qr
        AscendC::DataCopyPad(lb, la[base],
                             AscendC::DataCopyExtParams(static_cast<uint16_t>(ns), sizeof(float),
                                                        static_cast<uint32_t>((qr - 1) * sizeof(float)), 0, 0),
                             AscendC::DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
        PipeSync<AscendC::HardEvent::MTE2_S>(tp_);
        float lmax = kNegInf;
        bool nan = false;
        for (int32_t s = 0; s < ns; ++s) {
          const float v = lb.GetValue(s * 8);
          if (v != v) nan = true;
          else if (v > lmax) lmax = v;
        }
        float lse = kPosInf;
        AscendC::Duplicate(acc, 0.0f, dv);
        // No split has a score above -inf: the partials are 0 * v (0, or NaN where an attended
        // value is not finite) and add up with weight 1; lse stays +inf.
        const bool none = lmax == kNegInf && !nan;
        float sum = 1.0f;
        if (!none) {
          // Like torch.logsumexp: an infinite max is replaced by 0, so a split with lse +inf
          // gives lse +inf (NaN with a NaN split) and weights inf / inf = NaN.
          if (lmax == kNegInf || lmax == kPosInf) lmax = 0.0f;
          for (int32_t s = 0; s < ns; ++s) w.SetValue(s, lb.GetValue(s * 8) - lmax);
          PipeSync<AscendC::HardEvent::S_V>(tp_);
          AscendC::Exp(w, w, ns);
          PipeSync<AscendC::HardEvent::V_S>(tp_);
          sum = 0.0f;
          for (int32_t s = 0; s < ns; ++s) sum += w.GetValue(s);
          AscendC::Duplicate(ob, sum, 8);
          AscendC::PipeBarrier<PIPE_V>();
          AscendC::Ln(ob, ob, 8);
          PipeSync<AscendC::HardEvent::V_S>(tp_);
          lse = lmax + ob.GetValue(0);
        }
        // Every partial is merged, a split that saw no key too (weight 0: its 0 * NaN stays NaN).
        for (int32_t s = 0; s < ns; ++s) {
          const float ws = none ? 1.0f : w.GetValue(s) / sum;
          PipeSync<AscendC::HardEvent::V_MTE2>(tp_);
          AscendC::DataCopy(ob, oa[(base + static_cast<uint64_t>(s) * qr) * dv], dv);
          PipeSync<AscendC::HardEvent::MTE2_V>(tp_);
          AscendC::Muls(ob, ob, ws, dv);
          AscendC::PipeBarrier<PIPE_V>();
          AscendC::Add(acc, acc, ob, dv);
          AscendC::PipeBarrier<PIPE_V>();
        }
        writer_->Final(acc, b, row, 1, &lse);
        PipeSync<AscendC::HardEvent::V_MTE2>(tp_);
        PipeSync<AscendC::HardEvent::S_MTE2>(tp_);
      }
    }
  }

 private:
  const Args* a_ = nullptr;
  AscendC::TPipe* tp_ = nullptr;
  MlaRowWriter<QT>* writer_ = nullptr;
  int32_t ns_max_ = 1;
  AscendC::TBuf<AscendC::TPosition::VECCALC> lse_, w_, o_, acc_;
};

}  // namespace mla
}  // namespace dualops
