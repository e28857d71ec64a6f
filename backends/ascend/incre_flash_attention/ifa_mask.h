// Which keys of a kv tile each q row of the IFA kernel sees, on the vector cores: keys past the
// tile's valid ones, keys at or past a query's causal limit (S_q > 1) and keys atten_mask marks
// become -inf in a row of scores. The softmax applies it to the scores of a tile; the hidden-key
// fix-up (ifa_hidden.h) applies it to rows of zeros to learn which keys a row does not see.
#pragma once
#include "ascend/incre_flash_attention/ifa_common.h"

namespace dualops {
namespace ifa {

class IfaMask {
 public:
  // np: row pitch of score rows in UB (a multiple of 64).
  __aicore__ inline void Init(const Args& a, AscendC::TPipe& pipe, int32_t np, uint32_t score_elems) {
    a_ = &a;
    np_ = np;
    if (a.g.atten_mask != 0) {
      pipe.InitBuffer(m8_, np);
      pipe.InitBuffer(mh_, np * sizeof(half));
      pipe.InitBuffer(mf_, np * sizeof(float));
    }
    pipe.InitBuffer(bits_, RoundUp(static_cast<int32_t>(score_elems) / 8, 32));
    pipe.InitBuffer(col_, np * sizeof(float));
    AscendC::CreateVecIndex(col_.Get<float>(), 0.0f, np);
  }

  __aicore__ inline AscendC::LocalTensor<uint8_t> Bits() { return bits_.Get<uint8_t>(); }

  // Absolute key bound of query i of request u: it sees keys < limit.
  __aicore__ inline int32_t KeyLimit(const Unit& u, int32_t i) const {
    return a_->p.causal ? u.kv_len - a_->t.s_q + i + 1 : u.kv_len;
  }

  // Rows [c, c + cn) of the pass starting at unit row r0 (row r of the pass at sb[(r - c) * np])
  // for tile keys [t0, t0 + nv): every key the row does not see -> -inf.
  __aicore__ inline void Rows(const AscendC::LocalTensor<float>& sb, const Unit& u, int32_t r0, int32_t c, int32_t cn,
                              int32_t nv, int32_t t0) {
    const Args& a = *a_;
    AscendC::LocalTensor<float> col = col_.Get<float>();
    AscendC::LocalTensor<uint8_t> bits = bits_.Get<uint8_t>();
    for (int32_t r = c; r < c + cn; ++r) {
      int32_t i, h;
      RowCoords(a, u.kvh, r0 + r, i, h);
      AscendC::LocalTensor<float> row = sb[(r - c) * np_];
      const int32_t hi = MinI(nv, KeyLimit(u, i) - t0);
      if (hi <= 0) {
        AscendC::Duplicate(row, kNegInf, np_);
      } else if (hi < np_) {
        AscendC::CompareScalar(bits, col, static_cast<float>(hi), AscendC::CMPMODE::LT, np_);
        VecBarrier();
        AscendC::Select(row, bits, row, kNegInf, AscendC::SELMODE::VSEL_TENSOR_SCALAR_MODE, np_);
        VecBarrier();
      }
      if (a.g.atten_mask != 0 && hi > 0) Apply(row, u, i, h, nv, t0);
    }
    VecBarrier();
  }

 private:
  __aicore__ inline void Apply(const AscendC::LocalTensor<float>& row, const Unit& u, int32_t i, int32_t h, int32_t nv,
                               int32_t t0) {
    const Args& a = *a_;
    AscendC::GlobalTensor<uint8_t> g;
    g.SetGlobalBuffer(ascend::GmPtr<uint8_t>(a.g.atten_mask));
    const int64_t base = static_cast<int64_t>(u.b) * a.p.mask_stride_b + static_cast<int64_t>(h) * a.p.mask_stride_h +
                         static_cast<int64_t>(i) * a.p.mask_stride_q;
    if (a.p.mask_stride_k == 0) {   // one flag for the whole row
      if (g.GetValue(base)) {
        AscendC::Duplicate(row, kNegInf, np_);
        VecBarrier();
      }
      return;
    }
    AscendC::LocalTensor<uint8_t> m8 = m8_.Get<uint8_t>();
    AscendC::LocalTensor<half> mh = mh_.Get<half>();
    AscendC::LocalTensor<float> mf = mf_.Get<float>();
    AscendC::LocalTensor<uint8_t> bits = bits_.Get<uint8_t>();
    AscendC::DataCopyPad(m8, g[base + static_cast<int64_t>(t0) * a.p.mask_stride_k],
                         AscendC::DataCopyExtParams(1, nv, 0, 0, 0), AscendC::DataCopyPadExtParams<uint8_t>(false, 0, 0, 0));
    PipeSync<AscendC::HardEvent::MTE2_V>();
    // bool bytes -> fp16 -> fp32, keep where 0 (bytes past nv are already -inf in the row).
    AscendC::Cast(mh, m8, AscendC::RoundMode::CAST_NONE, np_);
    VecBarrier();
    AscendC::Cast(mf, mh, AscendC::RoundMode::CAST_NONE, np_);
    VecBarrier();
    AscendC::CompareScalar(bits, mf, 0.5f, AscendC::CMPMODE::LT, np_);
    VecBarrier();
    AscendC::Select(row, bits, row, kNegInf, AscendC::SELMODE::VSEL_TENSOR_SCALAR_MODE, np_);
    VecBarrier();
    PipeSync<AscendC::HardEvent::V_MTE2>();
  }

  const Args* a_ = nullptr;
  int32_t np_ = 64;
  AscendC::TBuf<AscendC::TPosition::VECCALC> m8_, mh_, mf_, bits_, col_;
};

}  // namespace ifa
}  // namespace dualops
