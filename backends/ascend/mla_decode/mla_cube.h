// The cube-core (AIC) side of MLA decode. Per pass: the q rows go to L1 once; per kv tile the
// latent vectors of the tile's keys go to L1 once (straight from the cache, or the vector cores'
// dequantized tile, rounded once to q's dtype, from the workspace) and serve as K (all d_qk
// columns) for mm1 = Q.K^T and as V (the first d_v columns of the same NZ tile, fractals transposed) for mm2 = P.V. Tiles
// alternate between kSlots L1 / workspace slots, so mm1 of tile t+1 runs while the vector cores
// do the softmax of tile t. Rows of invalid keys are zero in L1: no unused cache slot reaches the
// cube and P (0 there) times them stays 0.
#pragma once
#include "ascend/mla_decode/mla_common.h"

namespace dualops {
namespace mla {

template <typename QT>
class MlaCube {
 public:
  __aicore__ inline void Init(const Args& a) {
    a_ = &a;
    tp_ = &pipe_;
    const int32_t d = a.h.d_qk, n = a.h.kv_tile, rp = a.c.rows_p;
    pipe_.InitBuffer(q_l1_, rp * d * sizeof(QT));
    pipe_.InitBuffer(kv_l1_, kSlots * n * d * sizeof(QT));
    pipe_.InitBuffer(p_l1_, rp * n * sizeof(QT));
    pipe_.InitBuffer(l0a_, kL0aBytes);
    pipe_.InitBuffer(l0b_, kL0bBytes);
    pipe_.InitBuffer(l0c_, kL0cBytes);
  }

  __aicore__ inline void Process() {
    const int32_t core = static_cast<int32_t>(AscendC::GetBlockIdx());
    if (core < a_->h.num_cores) ForEachPass(*a_, core, *this);
  }

  __aicore__ inline void OnPass(const Pass& ps) {
    if (ps.tiles == 0) return;   // the vector cores write the empty result alone
    const int32_t mr = ps.r1 - ps.r0;
    kmap_.Init(*a_, ps);
    LoadQ(ps, mr);
    // One hand-off per tile each way: TileReady(t) says S of tile t and O of tile t - 1 are in
    // the workspace; the vector cores answer with ProbsReady(t), which for a dequantized cache
    // also says tile t + 1 is in the workspace (KvReady only announces the first tile).
    const bool convert = a_->h.convert != 0;
    if (convert) AscendC::CrossCoreWaitFlag(kFlagKvReady);
    for (int32_t t = 0; t < ps.tiles; ++t) {
      if (convert && t >= 1) AscendC::CrossCoreWaitFlag(kFlagProbsReady);
      LoadTile(ps, t);
      Mm1(ps, t, mr);
      if (t >= 1) {
        if (!convert) AscendC::CrossCoreWaitFlag(kFlagProbsReady);
        Mm2(ps, t - 1, mr);
      }
      AscendC::CrossCoreSetFlag<2, PIPE_FIX>(kFlagTileReady);
    }
    AscendC::CrossCoreWaitFlag(kFlagProbsReady);
    Mm2(ps, ps.tiles - 1, mr);
    AscendC::CrossCoreSetFlag<2, PIPE_FIX>(kFlagTileReady);
  }

 private:
  // q rows [r0, r1) -> L1 NZ (C0 stride mr rounded to 16); consecutive rows of one query token
  // are consecutive heads, one strided copy.
  __aicore__ inline void LoadQ(const Pass& ps, int32_t mr) {
    const Args& a = *a_;
    const int32_t mrp = RoundUp(mr, 16), d = a.h.d_qk;
    AscendC::GlobalTensor<QT> q;
    q.SetGlobalBuffer(Gm<QT>(a.p.q));
    AscendC::LocalTensor<QT> l1 = q_l1_.template Get<QT>();
    PipeSync<AscendC::HardEvent::MTE1_MTE2>(tp_);   // the previous pass's LoadData of Q is done
    for (int32_t r = ps.r0; r < ps.r1;) {
      const int32_t i = r / a.t.h_q, h = r % a.t.h_q;
      const int32_t run = MinI(a.t.h_q - h, ps.r1 - r);
      const int64_t off = static_cast<int64_t>(ps.b) * a.p.q_stride_b + static_cast<int64_t>(i) * a.p.q_stride_s +
                          static_cast<int64_t>(h) * a.p.q_stride_h;
      if (a.p.q_stride_h <= 65535) {
        AscendC::DataCopy(l1[(r - ps.r0) * 16], q[off],
                          AscendC::Nd2NzParams(1, run, d, 0, static_cast<uint16_t>(a.p.q_stride_h), mrp, 1, 0));
      } else {
        for (int32_t j = 0; j < run; ++j) {
          AscendC::DataCopy(l1[(r - ps.r0 + j) * 16], q[off + j * a.p.q_stride_h],
                            AscendC::Nd2NzParams(1, 1, d, 0, d, mrp, 1, 0));
        }
      }
      r += run;
    }
    PipeSync<AscendC::HardEvent::MTE2_MTE1>(tp_);
  }

  // The latent vectors of tile t -> L1 slot t % kSlots (NZ, kv_tile rows, C0 stride kv_tile).
  __aicore__ inline void LoadTile(const Pass& ps, int32_t t) {
    const Args& a = *a_;
    const int32_t d = a.h.d_qk, n = a.h.kv_tile;
    const uint32_t tile_elems = static_cast<uint32_t>(n * d);
    AscendC::LocalTensor<QT> dst = kv_l1_.template Get<QT>()[(t % kSlots) * tile_elems];
    PipeSync<AscendC::HardEvent::MTE1_MTE2>(tp_);   // the slot's previous tile is out of L1's readers
    if (a.h.convert) {   // every row written by the vector cores (invalid ones as zeros)
      AscendC::GlobalTensor<QT> w;
      w.SetGlobalBuffer(a.Ws<QT>(a.ws.k), static_cast<uint64_t>(kSlots) * tile_elems);
      AscendC::DataCopy(dst, w[static_cast<uint64_t>(t % kSlots) * tile_elems],
                        AscendC::Nd2NzParams(1, n, d, 0, d, n, 1, 0));
      PipeSync<AscendC::HardEvent::MTE2_MTE1>(tp_);
      return;
    }
    const int32_t nv = ps.TileKeys(n, t);
    if (nv < n || a.t.sparse) {   // rows that get no key stay zero
      AscendC::InitConstValue(dst, AscendC::InitConstValueParams<QT>(1, static_cast<uint16_t>(tile_elems * sizeof(QT) / 32),
                                                                     0, QT(0)));
      PipeSync<AscendC::HardEvent::MTE1_MTE2>(tp_);
    }
    AscendC::GlobalTensor<QT> pool[2];
    pool[0].SetGlobalBuffer(Gm<QT>(a.p.kv_cache));
    if (a.p.extra_kv_cache != nullptr) pool[1].SetGlobalBuffer(Gm<QT>(a.p.extra_kv_cache));
    const int32_t key0 = ps.k0 + t * n;
    for (int32_t r = 0; r < nv;) {
      int32_t which, run;
      const int64_t row = kmap_.Row(key0 + r, nv - r, which, run);
      if (row >= 0) {
        AscendC::DataCopy(dst[r * 16], pool[which][row * d], AscendC::Nd2NzParams(1, run, d, 0, d, n, 1, 0));
      }
      r += run;
    }
    PipeSync<AscendC::HardEvent::MTE2_MTE1>(tp_);
  }

  __aicore__ inline void LoadL0B(const AscendC::LocalTensor<QT>& dst, const AscendC::LocalTensor<QT>& src, int32_t start,
                                 int32_t count) {
    for (int32_t done = 0; done < count;) {   // LoadData repeats are 8-bit
      const int32_t k = MinI(255, count - done);
      AscendC::LoadData(dst[done * 256], src, AscendC::LoadData2DParams(start + done, k, 1, 0, 0, false, 0));
      done += k;
    }
  }

  // S slot = Q . K^T over the whole tile, fp32 into the workspace.
  __aicore__ inline void Mm1(const Pass& ps, int32_t t, int32_t mr) {
    const Args& a = *a_;
    const int32_t d = a.h.d_qk, n = a.h.kv_tile, nb = n / 16;
    const int32_t mrp = RoundUp(mr, 16), mb = mrp / 16;
    const uint32_t tile_elems = static_cast<uint32_t>(n * d);
    AscendC::GlobalTensor<float> s;
    s.SetGlobalBuffer(a.Ws<float>(a.ws.s) + static_cast<uint64_t>(t % kSlots) * a.c.rows_p * n,
                      static_cast<uint64_t>(a.c.rows_p) * n);
    AscendC::LocalTensor<QT> q = q_l1_.template Get<QT>();
    AscendC::LocalTensor<QT> kv = kv_l1_.template Get<QT>()[(t % kSlots) * tile_elems];
    AscendC::LocalTensor<QT> l0a = l0a_.template Get<QT>();
    AscendC::LocalTensor<QT> l0b = l0b_.template Get<QT>();
    AscendC::LocalTensor<float> l0c = l0c_.template Get<float>();
    PipeSync<AscendC::HardEvent::FIX_M>(tp_);   // the previous Fixpipe has read L0C
    for (int32_t d0 = 0; d0 < d; d0 += a.c.kc1) {
      const int32_t kcw = MinI(a.c.kc1, d - d0), kb = kcw / 16;
      PipeSync<AscendC::HardEvent::M_MTE1>(tp_);   // L0A / L0B free again
      for (int32_t i = 0; i < mb; ++i) {   // Q: NZ (column-block major) -> ZZ (row-block major)
        AscendC::LoadData(l0a[i * kb * 256], q, AscendC::LoadData2DParams((d0 / 16) * mb + i, kb, mb, 0, 0, false, 0));
      }
      LoadL0B(l0b, kv, (d0 / 16) * nb, kb * nb);   // K's NZ is the ZN of K^T
      PipeSync<AscendC::HardEvent::MTE1_M>(tp_);
      AscendC::Mmad(l0c, l0a, l0b, AscendC::MmadParams(mr, n, kcw, 0, false, d0 == 0));
    }
    PipeSync<AscendC::HardEvent::M_FIX>(tp_);
    AscendC::Fixpipe<float, float, AscendC::CFG_ROW_MAJOR>(s, l0c, AscendC::FixpipeParamsV220(n, mr, mrp, n, false));
  }

  // O slot = P . V for tile t, one pass: P rounded once to q's dtype (as the vector cores wrote it)
  // times the tile's values, accumulated in L0C in fp32.
  __aicore__ inline void Mm2(const Pass& ps, int32_t t, int32_t mr) {
    const Args& a = *a_;
    const int32_t d = a.h.d_qk, dv = a.h.d_v, n = a.h.kv_tile, nbt = n / 16;
    const int32_t mrp = RoundUp(mr, 16), mb = mrp / 16;
    const uint32_t tile_elems = static_cast<uint32_t>(n * d);
    const uint64_t p_part = static_cast<uint64_t>(a.c.rows_p) * n;
    AscendC::GlobalTensor<QT> p;
    p.SetGlobalBuffer(a.Ws<QT>(a.ws.p) + static_cast<uint64_t>(t % kSlots) * p_part, p_part);
    AscendC::GlobalTensor<float> o;
    o.SetGlobalBuffer(a.Ws<float>(a.ws.o) + static_cast<uint64_t>(t % kSlots) * a.c.rows_p * dv,
                      static_cast<uint64_t>(a.c.rows_p) * dv);
    AscendC::LocalTensor<QT> pl = p_l1_.template Get<QT>();
    AscendC::LocalTensor<QT> kv = kv_l1_.template Get<QT>()[(t % kSlots) * tile_elems];
    AscendC::LocalTensor<QT> l0a = l0a_.template Get<QT>();
    AscendC::LocalTensor<QT> l0b = l0b_.template Get<QT>();
    AscendC::LocalTensor<float> l0c = l0c_.template Get<float>();
    // P of the whole tile -> L1 NZ (columns past the valid keys are exact zeros).
    PipeSync<AscendC::HardEvent::MTE1_MTE2>(tp_);
    AscendC::DataCopy(pl, p, AscendC::Nd2NzParams(1, mr, n, 0, n, mrp, 1, 0));
    PipeSync<AscendC::HardEvent::MTE2_MTE1>(tp_);
    const int32_t nv = ps.TileKeys(n, t);
    for (int32_t d0 = 0; d0 < dv; d0 += a.c.nc2) {
      const int32_t ncw = MinI(a.c.nc2, dv - d0), nb = ncw / 16;
      PipeSync<AscendC::HardEvent::FIX_M>(tp_);   // the previous Fixpipe has read L0C
      for (int32_t k0 = 0; k0 < nv; k0 += a.c.kc2) {
        const int32_t kcw = RoundUp(MinI(a.c.kc2, nv - k0), 16), kb = kcw / 16;
        PipeSync<AscendC::HardEvent::M_MTE1>(tp_);
        for (int32_t i = 0; i < mb; ++i) {
          AscendC::LoadData(l0a[i * kb * 256], pl, AscendC::LoadData2DParams((k0 / 16) * mb + i, kb, mb, 0, 0, false, 0));
        }
        for (int32_t j = 0; j < kb; ++j) {   // V's NZ fractals (rows = keys) transposed into ZN
          AscendC::LoadData(l0b[j * nb * 256], kv,
                            AscendC::LoadData2DParams((d0 / 16) * nbt + k0 / 16 + j, nb, nbt, 0, 0, true, 0));
        }
        PipeSync<AscendC::HardEvent::MTE1_M>(tp_);
        AscendC::Mmad(l0c, l0a, l0b, AscendC::MmadParams(mr, ncw, kcw, 0, false, k0 == 0));
      }
      PipeSync<AscendC::HardEvent::M_FIX>(tp_);
      AscendC::Fixpipe<float, float, AscendC::CFG_ROW_MAJOR>(o[d0], l0c, AscendC::FixpipeParamsV220(ncw, mr, mrp, dv, false));
    }
    PipeSync<AscendC::HardEvent::FIX_M>(tp_);
    PipeSync<AscendC::HardEvent::M_MTE1>(tp_);
  }

  const Args* a_ = nullptr;
  AscendC::TPipe* tp_ = nullptr;
  KeyMap kmap_;
  AscendC::TPipe pipe_;
  AscendC::TBuf<AscendC::TPosition::A1> q_l1_, kv_l1_, p_l1_;
  AscendC::TBuf<AscendC::TPosition::A2> l0a_;
  AscendC::TBuf<AscendC::TPosition::B2> l0b_;
  AscendC::TBuf<AscendC::TPosition::CO1> l0c_;
};

}  // namespace mla
}  // namespace dualops
