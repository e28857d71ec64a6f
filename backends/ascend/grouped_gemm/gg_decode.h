// fp8 (e4m3) operands for the A2 cube, which has no fp8 type: before the GEMM the vector cores
// decode x and the weights of every non-empty group into fp16 copies in the workspace (every
// e4m3 value is exact in fp16, so no scale is applied here; the recipe's scales act on the fp32
// products in the epilogue). The bytes are decoded in software with a 256-entry fp16 table in UB
// and Gather, as the IFA kernel decodes fp8 caches (common/fp8.h). Work is
// dealt in chunks of rows over all vector cores; a SyncAll then hands the copies to the cubes.
#pragma once
#include "ascend/grouped_gemm/gg_common.h"
#include "ascend/common/fp8.h"

namespace dualops {
namespace gg {

constexpr int32_t kDecodeCols = 4096;   // e4m3 bytes of one row decoded at once

class GgDecode {
 public:
  __aicore__ inline void Init(const Args& a) {
    a_ = &a;
    cols_ = MinI(a.t.k, kDecodeCols);
    const int32_t cols_p = RoundUpI(cols_, 32);
    rows_ = a.t.k <= kDecodeCols ? MaxI(1, kDecodeCols / cols_p) : 1;
    const uint32_t elems = static_cast<uint32_t>(rows_ * cols_p);
    pipe_.InitBuffer(raw_, elems);
    pipe_.InitBuffer(h16_, elems * sizeof(half));
    pipe_.InitBuffer(idx_, elems * sizeof(int32_t));
    pipe_.InitBuffer(out_, elems * sizeof(half));
    pipe_.InitBuffer(lut_, ascend::kE4m3TableBytes);
    ascend::FillE4m3Table(lut_.Get<uint16_t>());
    const AscendC::TEventID id = pipe_.FetchEventID(AscendC::HardEvent::S_V);
    AscendC::SetFlag<AscendC::HardEvent::S_V>(id);
    AscendC::WaitFlag<AscendC::HardEvent::S_V>(id);
  }

  // The x rows of every group (masked layout: only rows below masked_m[g]), then the weight rows
  // of non-empty groups; chunk c of each goes to vector core c mod (2 * cores).
  __aicore__ inline void Process() {
    const Args& a = *a_;
    me_ = static_cast<int32_t>(AscendC::GetBlockIdx());
    nv_ = static_cast<int32_t>(AscendC::GetBlockNum() * AscendC::GetSubBlockNum());
    AscendC::GlobalTensor<int32_t> off, mm;
    off.SetGlobalBuffer(GmPtr<int32_t>(a.p.addr_offsets), a.t.num_groups + 1);
    mm.SetGlobalBuffer(GmPtr<int32_t>(a.p.addr_masked), a.t.num_groups);
    const uint64_t x16 = a.ws_addr + a.ws.x16, w16 = a.ws_addr + a.ws.w16;
    if (a.t.layout == GgLayout::kMasked) {
      for (int32_t g = 0; g < a.t.num_groups; ++g) {
        Span(a.p.addr_x, x16, static_cast<int64_t>(g) * a.t.m_max, MinI(MaxI(mm.GetValue(g), 0), a.t.m_max));
      }
    } else {
      Span(a.p.addr_x, x16, 0, static_cast<int32_t>(ContiguousRows(a)));
    }
    for (int32_t g = 0; g < a.t.num_groups; ++g) {
      const int32_t rows = a.t.layout == GgLayout::kMasked ? mm.GetValue(g) : off.GetValue(g + 1) - off.GetValue(g);
      if (rows <= 0) continue;   // an empty group's weights are never read
      Span(a.p.addr_w, w16, static_cast<int64_t>(g) * a.t.n, a.t.n);
    }
  }

 private:
  // Rows [r0, r0 + count) of an e4m3 [*, K] matrix, in chunks dealt over the vector cores.
  __aicore__ inline void Span(uint64_t src, uint64_t dst, int64_t r0, int32_t count) {
    const int32_t col_chunks = CeilDivI(a_->t.k, cols_);
    for (int32_t r = 0; r < count; r += rows_) {
      for (int32_t cc = 0; cc < col_chunks; ++cc, ++chunk_) {
        if (chunk_ % nv_ != me_) continue;
        Rows(src, dst, r0 + r, MinI(rows_, count - r), cc);
      }
    }
  }

  template <AscendC::HardEvent E>
  __aicore__ inline void Sync() {
    const AscendC::TEventID id = pipe_.FetchEventID(E);
    AscendC::SetFlag<E>(id);
    AscendC::WaitFlag<E>(id);
  }

  // Rows [r, r + rows), columns of chunk cc, of an e4m3 [*, K] matrix at src -> fp16 at dst.
  __aicore__ inline void Rows(uint64_t src, uint64_t dst, int64_t r, int32_t rows, int32_t cc) {
    const int32_t kk = a_->t.k;
    const int32_t c0 = cc * cols_;
    const int32_t cols = MinI(cols_, kk - c0);
    const int32_t cols_p = RoundUpI(cols, 32);
    AscendC::GlobalTensor<uint8_t> gs;
    gs.SetGlobalBuffer(GmPtr<uint8_t>(src));
    AscendC::GlobalTensor<half> gd;
    gd.SetGlobalBuffer(GmPtr<half>(dst));
    AscendC::LocalTensor<uint8_t> raw = raw_.Get<uint8_t>();
    AscendC::LocalTensor<half> h = h16_.Get<half>();
    AscendC::LocalTensor<int32_t> idx = idx_.Get<int32_t>();
    AscendC::LocalTensor<half> out = out_.Get<half>();
    const uint32_t count = static_cast<uint32_t>(rows * cols_p);
    AscendC::DataCopyPad(raw, gs[r * kk + c0],
                         AscendC::DataCopyExtParams(static_cast<uint16_t>(rows), static_cast<uint32_t>(cols),
                                                    static_cast<uint32_t>(kk - cols), 0, 0),
                         AscendC::DataCopyPadExtParams<uint8_t>(false, 0, 0, 0));
    Sync<AscendC::HardEvent::MTE2_V>();
    ascend::E4m3ToHalf(out, raw, h, idx, lut_.Get<uint16_t>(), count);
    Sync<AscendC::HardEvent::V_MTE3>();
    const uint32_t len = static_cast<uint32_t>(cols * sizeof(half));
    const uint32_t ub_gap = (static_cast<uint32_t>(cols_p * sizeof(half)) - (len + 31) / 32 * 32) / 32;
    AscendC::DataCopyPad(gd[r * kk + c0], out,
                         AscendC::DataCopyExtParams(static_cast<uint16_t>(rows), len, ub_gap,
                                                    static_cast<uint32_t>((kk - cols) * sizeof(half)), 0));
    Sync<AscendC::HardEvent::MTE3_V>();
    Sync<AscendC::HardEvent::MTE3_MTE2>();
  }

  const Args* a_ = nullptr;
  int32_t cols_ = 32, rows_ = 1, me_ = 0, nv_ = 1, chunk_ = 0;
  AscendC::TPipe pipe_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> raw_, h16_, idx_, out_, lut_;
};

}  // namespace gg
}  // namespace dualops
