// The cube-core (AIC) side of IFA: per unit and q tile, mm1 = Q . K^T into the S workspace
// slot of each kv tile, and once the vector cores have turned it into P, mm2 = P . V into the O
// slot. Tiles alternate between kSlots slots, so mm1 of tile t+1 runs while the vector cores
// do the softmax of tile t. Invalid key rows (past the tile's valid keys) are zero in L1, so no
// unused cache slot (NaN in the tests) reaches the cube. Operands the vector cores produce (P,
// and converted K / V tiles) are rounded once to q's dtype; each product is one cube pass
// accumulated in fp32 in L0C (docs/parity.md counts the roundings).
#pragma once
#include "ascend/incre_flash_attention/ifa_common.h"

namespace dualops {
namespace ifa {


template <typename QT>
class IfaCube {
 public:
  __aicore__ inline void Init(const Args& a) {
    a_ = &a;
    const int32_t d = a.t.head_dim;
    const int32_t rp = a.cube.rows_p;
    pipe_.InitBuffer(q_l1_, rp * d * sizeof(QT));
    pipe_.InitBuffer(k_l1_, a.cube.nc1 * d * sizeof(QT));
    pipe_.InitBuffer(p_l1_, rp * a.cube.kc2 * sizeof(QT));
    pipe_.InitBuffer(v_l1_, a.cube.kc2 * d * sizeof(QT));
    pipe_.InitBuffer(l0a_, kL0aBytes);
    pipe_.InitBuffer(l0b_, kL0bBytes);
    pipe_.InitBuffer(l0c_, kL0cBytes);
  }

  __aicore__ inline void Process() {
    const Args& a = *a_;
    const int32_t core = static_cast<int32_t>(AscendC::GetBlockIdx());
    for (int32_t u = core; u < a.t.num_units; u += a.t.num_cores) {
      Unit unit;
      unit.Decode(a, u);
      if (unit.tiles == 0) continue;
      kloc_.Init(a, unit.b, unit.kvh);
      for (int32_t r0 = 0; r0 < a.t.q_rows; r0 += a.t.q_tile_rows) {
        RunPass(unit, r0, MinI(a.t.q_tile_rows, a.t.q_rows - r0));
      }
    }
  }

 private:
  __aicore__ inline void RunPass(const Unit& u, int32_t r0, int32_t mr) {
    const Args& a = *a_;
    LoadQ(u, r0, mr);
    for (int32_t t = 0; t < u.tiles; ++t) {
      if (a.convert_kv) AscendC::CrossCoreWaitFlag(kFlagKvReady);
      Mm1(u, t, mr);
      AscendC::CrossCoreSetFlag<2, PIPE_FIX>(kFlagScoresReady);
      if (t >= 1) {
        AscendC::CrossCoreWaitFlag(kFlagProbsReady);
        Mm2(u, t - 1, mr);
        AscendC::CrossCoreSetFlag<2, PIPE_FIX>(kFlagOutReady);
      }
    }
    AscendC::CrossCoreWaitFlag(kFlagProbsReady);
    Mm2(u, u.tiles - 1, mr);
    AscendC::CrossCoreSetFlag<2, PIPE_FIX>(kFlagOutReady);
  }

  // Q rows [r0, r0 + mr) of the unit (r = g * s_q + i) -> L1, NZ with C0Stride = mr rounded to 16.
  __aicore__ inline void LoadQ(const Unit& u, int32_t r0, int32_t mr) {
    const Args& a = *a_;
    const int32_t mrp = RoundUp(mr, 16);
    PipeSync<AscendC::HardEvent::MTE1_MTE2>();   // the last pass's LoadData may still read q_l1
    AscendC::GlobalTensor<QT> q;
    q.SetGlobalBuffer(ascend::GmPtr<QT>(a.g.q));
    AscendC::LocalTensor<QT> l1 = q_l1_.template Get<QT>();
    for (int32_t r = r0; r < r0 + mr;) {
      int32_t i, h;
      RowCoords(a, u.kvh, r, i, h);
      const int32_t run = MinI(a.t.s_q - i, r0 + mr - r);   // same head, consecutive queries
      const int64_t off = static_cast<int64_t>(u.b) * a.p.q_stride_b + static_cast<int64_t>(i) * a.p.q_stride_s +
                          static_cast<int64_t>(h) * a.p.q_stride_h;
      CopyRowsNz(l1[(r - r0) * 16], q, off, run, a.p.q_stride_s, mrp);
      r += run;
    }
    PipeSync<AscendC::HardEvent::MTE2_MTE1>();
  }

  // `rows` rows of D elements, row stride `stride` (elements) in GM -> L1 NZ at dst.
  __aicore__ inline void CopyRowsNz(const AscendC::LocalTensor<QT>& dst, const AscendC::GlobalTensor<QT>& src,
                                    int64_t off, int32_t rows, int64_t stride, int32_t c0_stride) {
    const int32_t d = a_->t.head_dim;
    if (stride <= 65535) {
      AscendC::DataCopy(dst, src[off], AscendC::Nd2NzParams(1, rows, d, 0, static_cast<uint16_t>(stride), c0_stride, 1, 0));
    } else {   // srcDValue is 16-bit: one row per copy
      for (int32_t r = 0; r < rows; ++r) {
        AscendC::DataCopy(dst[r * 16], src[off + r * stride], AscendC::Nd2NzParams(1, 1, d, 0, d, c0_stride, 1, 0));
      }
    }
  }

  // Key rows [n0, n0 + valid) of tile t (K or V) -> L1 NZ with rows_pad rows, the rest zero.
  __aicore__ inline void LoadKv(const AscendC::LocalTensor<QT>& dst, bool is_v, const Unit& u, int32_t t, int32_t n0,
                                int32_t valid, int32_t rows_pad) {
    const Args& a = *a_;
    const int32_t d = a.t.head_dim;
    if (valid < rows_pad) {   // (InitConstValue on L1 runs on MTE2, in order with the copies)
      AscendC::InitConstValue(dst, AscendC::InitConstValueParams<QT>(
                                       1, static_cast<uint16_t>(rows_pad * d * sizeof(QT) / 32), 0, QT(0)));
    }
    if (a.convert_kv) {
      const int32_t slot = t % kSlots;
      AscendC::GlobalTensor<QT> w;
      w.SetGlobalBuffer(a.Ws<QT>(is_v ? a.ws.v : a.ws.k), static_cast<uint64_t>(kSlots) * a.t.kv_tile * d);
      CopyRowsNz(dst, w, (static_cast<int64_t>(slot) * a.t.kv_tile + n0) * d, valid, d, rows_pad);
      return;
    }
    AscendC::GlobalTensor<QT> cache;
    cache.SetGlobalBuffer(ascend::GmPtr<QT>(is_v ? a.g.v : a.g.k));
    const int64_t s0 = is_v ? a.p.v_stride_0 : a.p.k_stride_0;
    const int64_t s1 = is_v ? a.p.v_stride_1 : a.p.k_stride_1;
    const int64_t s2 = is_v ? a.p.v_stride_2 : a.p.k_stride_2;
    const int32_t key0 = u.k0 + t * a.t.kv_tile + n0;
    for (int32_t r = 0; r < valid;) {
      int32_t run;
      const int64_t off = kloc_.Offset(key0 + r, valid - r, s0, s1, s2, run);
      CopyRowsNz(dst[r * 16], cache, off, run, s1, rows_pad);
      r += run;
    }
  }

  __aicore__ inline void LoadL0B(const AscendC::LocalTensor<QT>& dst, const AscendC::LocalTensor<QT>& src,
                                 int32_t start, int32_t count) {
    // LoadData repeats are 8-bit: split long straight loads.
    for (int32_t done = 0; done < count;) {
      const int32_t n = MinI(255, count - done);
      AscendC::LoadData(dst[done * 256], src, AscendC::LoadData2DParams(start + done, n, 1, 0, 0, false, 0));
      done += n;
    }
  }

  // S[:, tile keys] = Q . K^T for the valid keys of tile t.
  __aicore__ inline void Mm1(const Unit& u, int32_t t, int32_t mr) {
    const Args& a = *a_;
    const int32_t d = a.t.head_dim, n = a.t.kv_tile;
    const int32_t mrp = RoundUp(mr, 16), mb = mrp / 16;
    const int32_t nv = u.TileKeys(a, t);
    const int32_t slot = t % kSlots;
    AscendC::GlobalTensor<float> s;
    s.SetGlobalBuffer(a.Ws<float>(a.ws.s) + static_cast<uint64_t>(slot) * a.cube.rows_p * n,
                      static_cast<uint64_t>(a.cube.rows_p) * n);
    AscendC::LocalTensor<QT> q = q_l1_.template Get<QT>();
    AscendC::LocalTensor<QT> k = k_l1_.template Get<QT>();
    AscendC::LocalTensor<QT> l0a = l0a_.template Get<QT>();
    AscendC::LocalTensor<QT> l0b = l0b_.template Get<QT>();
    AscendC::LocalTensor<float> l0c = l0c_.template Get<float>();
    for (int32_t n0 = 0; n0 < nv; n0 += a.cube.nc1) {
      const int32_t valid = MinI(a.cube.nc1, nv - n0);
      const int32_t ncw = RoundUp(valid, 16), nb = ncw / 16;
      // k_l1 is reloaded: the previous chunk's LoadData (MTE1) may still read it.
      PipeSync<AscendC::HardEvent::MTE1_MTE2>();
      LoadKv(k, false, u, t, n0, valid, ncw);
      PipeSync<AscendC::HardEvent::MTE2_MTE1>();
      for (int32_t d0 = 0; d0 < d; d0 += a.cube.kc1) {
        const int32_t kcw = MinI(a.cube.kc1, d - d0), kb = kcw / 16;
        for (int32_t i = 0; i < mb; ++i) {   // Q: NZ (d-block major) -> ZZ (row-block major)
          AscendC::LoadData(l0a[i * kb * 256], q, AscendC::LoadData2DParams((d0 / 16) * mb + i, kb, mb, 0, 0, false, 0));
        }
        LoadL0B(l0b, k, (d0 / 16) * nb, kb * nb);   // K's NZ is already the ZN layout of K^T
        PipeSync<AscendC::HardEvent::MTE1_M>();
        AscendC::Mmad(l0c, l0a, l0b, AscendC::MmadParams(mr, ncw, kcw, 0, false, d0 == 0));
        PipeSync<AscendC::HardEvent::M_MTE1>();
      }
      PipeSync<AscendC::HardEvent::M_FIX>();
      AscendC::Fixpipe<float, float, AscendC::CFG_ROW_MAJOR>(s[n0], l0c, AscendC::FixpipeParamsV220(ncw, mr, mrp, n, false));
      PipeSync<AscendC::HardEvent::FIX_M>();
    }
  }

  // O = P . V for the valid keys of tile t, one pass, accumulated in L0C.
  __aicore__ inline void Mm2(const Unit& u, int32_t t, int32_t mr) {
    const Args& a = *a_;
    const int32_t d = a.t.head_dim, n = a.t.kv_tile;
    const int32_t mrp = RoundUp(mr, 16), mb = mrp / 16;
    const int32_t nv = u.TileKeys(a, t);
    const int32_t slot = t % kSlots;
    const uint64_t p_tile = static_cast<uint64_t>(a.cube.rows_p) * n;
    AscendC::GlobalTensor<QT> p;
    p.SetGlobalBuffer(a.Ws<QT>(a.ws.p) + static_cast<uint64_t>(slot) * p_tile, p_tile);
    AscendC::GlobalTensor<float> o;
    o.SetGlobalBuffer(a.Ws<float>(a.ws.o) + static_cast<uint64_t>(slot) * a.cube.rows_p * d,
                      static_cast<uint64_t>(a.cube.rows_p) * d);
    AscendC::LocalTensor<QT> pl = p_l1_.template Get<QT>();
    AscendC::LocalTensor<QT> vl = v_l1_.template Get<QT>();
    AscendC::LocalTensor<QT> l0a = l0a_.template Get<QT>();
    AscendC::LocalTensor<QT> l0b = l0b_.template Get<QT>();
    AscendC::LocalTensor<float> l0c = l0c_.template Get<float>();
    for (int32_t d0 = 0; d0 < d; d0 += a.cube.nc2) {
      const int32_t ncw = MinI(a.cube.nc2, d - d0), nb = ncw / 16;
      for (int32_t k0 = 0; k0 < nv; k0 += a.cube.kc2) {
        const int32_t valid = MinI(a.cube.kc2, nv - k0);
        const int32_t kcw = RoundUp(valid, 16), kb = kcw / 16;
        // P columns past the valid keys are exact zeros (written by the vector cores).
        PipeSync<AscendC::HardEvent::MTE1_MTE2>();
        AscendC::DataCopy(pl, p[k0], AscendC::Nd2NzParams(1, mr, kcw, 0, n, mrp, 1, 0));
        LoadKv(vl, true, u, t, k0, valid, kcw);
        PipeSync<AscendC::HardEvent::MTE2_MTE1>();
        for (int32_t i = 0; i < mb; ++i) {
          AscendC::LoadData(l0a[i * kb * 256], pl, AscendC::LoadData2DParams(i, kb, mb, 0, 0, false, 0));
        }
        for (int32_t j = 0; j < kb; ++j) {   // V's NZ fractals transposed into ZN
          AscendC::LoadData(l0b[j * nb * 256], vl, AscendC::LoadData2DParams((d0 / 16) * kb + j, nb, kb, 0, 0, true, 0));
        }
        PipeSync<AscendC::HardEvent::MTE1_M>();
        AscendC::Mmad(l0c, l0a, l0b, AscendC::MmadParams(mr, ncw, kcw, 0, false, k0 == 0));
        PipeSync<AscendC::HardEvent::M_MTE1>();
      }
      PipeSync<AscendC::HardEvent::M_FIX>();
      AscendC::Fixpipe<float, float, AscendC::CFG_ROW_MAJOR>(o[d0], l0c, AscendC::FixpipeParamsV220(ncw, mr, mrp, d, false));
      PipeSync<AscendC::HardEvent::FIX_M>();
    }
  }

  const Args* a_ = nullptr;
  KeyLocator kloc_;
  AscendC::TPipe pipe_;
  AscendC::TBuf<AscendC::TPosition::A1> q_l1_, k_l1_, p_l1_, v_l1_;
  AscendC::TBuf<AscendC::TPosition::A2> l0a_;
  AscendC::TBuf<AscendC::TPosition::B2> l0b_;
  AscendC::TBuf<AscendC::TPosition::CO1> l0c_;
};

}  // namespace ifa
}  // namespace dualops
