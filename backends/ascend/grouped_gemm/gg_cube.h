// The cube-core (AIC) side of the grouped GEMM: per output tile, the K loop in tile_k steps,
// double-buffered: K step s copies its A (x rows) and B (w rows) slices GM -> L1 (Nd2Nz) into
// L1 stage s % 2 while step s - 1 is moved L1 -> L0A / L0B and multiplied; the fp32 (int32 for
// int8) accumulator stays in L0C for the whole K loop. Then
//   scale mode none:  Fixpipe L0C -> y, converting to the output dtype on the way;
//   other modes:      Fixpipe L0C -> the AI core's workspace slot, for the vector cores'
//                     dequant epilogue (blockwise: one slot per 128-wide K slice).
// Padding rows / columns of a fractal only reach padding of the result (never written); K
// columns past K are zeros (Nd2Nz pads the last C0 block), so they add nothing.
#pragma once
#include "ascend/grouped_gemm/gg_common.h"

namespace dualops {
namespace gg {

template <typename AT, typename CT, typename OT>
class GgCube {
 public:
  static constexpr int32_t kC0 = 32 / sizeof(AT);                 // K elements of one fractal row
  static constexpr int32_t kFractal = 512 / sizeof(AT);           // elements of one fractal

  __aicore__ inline void Init(const Args& a) {
    a_ = &a;
    mp_ = RoundUpI(a.t.tile_m, 16);
    a_stage_ = mp_ * a.t.tile_k;
    b_stage_ = a.t.tile_n * a.t.tile_k;
    pipe_.InitBuffer(a_l1_, 2 * a_stage_ * sizeof(AT));
    pipe_.InitBuffer(b_l1_, 2 * b_stage_ * sizeof(AT));
    pipe_.InitBuffer(l0a_, 2 * a_stage_ * sizeof(AT));
    pipe_.InitBuffer(l0b_, 2 * b_stage_ * sizeof(AT));
    parts_ = PartsPerHandOff(a.t);
    part_elems_ = mp_ * a.t.tile_n;
    pipe_.InitBuffer(l0c_, parts_ * part_elems_ * sizeof(CT));
    for (int32_t s = 0; s < 2; ++s) {
      ev_l1_free_[s] = pipe_.AllocEventID<AscendC::HardEvent::MTE1_MTE2>();
      ev_l1_full_[s] = pipe_.AllocEventID<AscendC::HardEvent::MTE2_MTE1>();
      ev_l0_free_[s] = pipe_.AllocEventID<AscendC::HardEvent::M_MTE1>();
      ev_l0_full_[s] = pipe_.AllocEventID<AscendC::HardEvent::MTE1_M>();
    }
    ev_m_fix_ = pipe_.AllocEventID<AscendC::HardEvent::M_FIX>();
    ev_fix_m_ = pipe_.AllocEventID<AscendC::HardEvent::FIX_M>();
  }

  __aicore__ inline void Process() {
    const Args& a = *a_;
    const int32_t core = static_cast<int32_t>(AscendC::GetBlockIdx());
    gx_.SetGlobalBuffer(GmPtr<AT>(a.CubeX()));
    gw_.SetGlobalBuffer(GmPtr<AT>(a.CubeW()));
    // Every stage starts free; the matching waits at the end leave no flag set.
    for (int32_t s = 0; s < 2; ++s) {
      AscendC::SetFlag<AscendC::HardEvent::MTE1_MTE2>(ev_l1_free_[s]);
      AscendC::SetFlag<AscendC::HardEvent::M_MTE1>(ev_l0_free_[s]);
    }
    AscendC::SetFlag<AscendC::HardEvent::FIX_M>(ev_fix_m_);
    for (int32_t i = core; i < a.t.num_items; i += a.t.num_cores) {
      TileOf tile;
      tile.Decode(a, i);
      if (tile.mr > 0) RunTile(tile, core);
    }
    for (int32_t s = 0; s < 2; ++s) {
      AscendC::WaitFlag<AscendC::HardEvent::MTE1_MTE2>(ev_l1_free_[s]);
      AscendC::WaitFlag<AscendC::HardEvent::M_MTE1>(ev_l0_free_[s]);
    }
    AscendC::WaitFlag<AscendC::HardEvent::FIX_M>(ev_fix_m_);
    // Slots still owed back by the vector cores.
    for (int32_t j = MaxI(0, handed_ - kSlots); j < handed_; ++j) AscendC::CrossCoreWaitFlag(kFlagSlotFree);
  }

 private:
  __aicore__ inline void RunTile(const TileOf& tile, int32_t core) {
    const Args& a = *a_;
    const bool blockwise = a.t.scale_mode == GgScaleMode::kBlockwise;
    // blockwise: K block kt's partial product goes to L0C part kt % parts_; a full set of
    // parts (or the last block) is handed over at once.
    for (int32_t kt = 0; kt < a.t.num_k_tiles; ++kt) {
      const int32_t part = blockwise ? kt % parts_ : 0;
      Step(tile, kt, kt == 0 || blockwise, part);
      const bool last = kt == a.t.num_k_tiles - 1;
      if (last || (blockwise && part == parts_ - 1)) Emit(tile, core, part + 1);
    }
  }

  // One K step into L0C part `part` (fresh when `init`).
  __aicore__ inline void Step(const TileOf& tile, int32_t kt, bool init, int32_t part) {
    const Args& a = *a_;
    const int32_t s = step_ & 1;
    ++step_;
    const int32_t k0 = kt * a.t.tile_k;
    const int32_t kw = MinI(a.t.tile_k, a.t.k - k0);
    // L1 keeps A with C0 stride mp_ (mb row blocks); only the mrb blocks holding rows are moved on.
    const int32_t kb = CeilDivI(kw, kC0), mb = mp_ / 16, mrb = CeilDivI(tile.mr, 16);
    const int32_t ncp = RoundUpI(tile.nc, 16), nb = ncp / 16;
    const uint16_t kstride = static_cast<uint16_t>(a.t.k);
    AscendC::LocalTensor<AT> al1 = a_l1_.template Get<AT>()[s * a_stage_];
    AscendC::LocalTensor<AT> bl1 = b_l1_.template Get<AT>()[s * b_stage_];
    AscendC::LocalTensor<AT> l0a = l0a_.template Get<AT>()[s * a_stage_];
    AscendC::LocalTensor<AT> l0b = l0b_.template Get<AT>()[s * b_stage_];
    AscendC::LocalTensor<CT> l0c = l0c_.template Get<CT>()[part * part_elems_];

    AscendC::WaitFlag<AscendC::HardEvent::MTE1_MTE2>(ev_l1_free_[s]);
    AscendC::DataCopy(al1, gx_[tile.row0 * a.t.k + k0],
                      AscendC::Nd2NzParams(1, static_cast<uint16_t>(tile.mr), static_cast<uint16_t>(kw), 0, kstride,
                                           static_cast<uint16_t>(mp_), 1, 0));
    const int64_t wrow = static_cast<int64_t>(tile.g) * a.t.n + tile.n0;
    AscendC::DataCopy(bl1, gw_[wrow * a.t.k + k0],
                      AscendC::Nd2NzParams(1, static_cast<uint16_t>(tile.nc), static_cast<uint16_t>(kw), 0, kstride,
                                           static_cast<uint16_t>(ncp), 1, 0));
    AscendC::SetFlag<AscendC::HardEvent::MTE2_MTE1>(ev_l1_full_[s]);
    AscendC::WaitFlag<AscendC::HardEvent::MTE2_MTE1>(ev_l1_full_[s]);

    AscendC::WaitFlag<AscendC::HardEvent::M_MTE1>(ev_l0_free_[s]);
    for (int32_t i = 0; i < mrb; ++i) {   // A: NZ (K-block major) -> ZZ (row-block major)
      AscendC::LoadData(l0a[i * kb * kFractal], al1,
                        AscendC::LoadData2DParams(static_cast<uint16_t>(i), static_cast<uint8_t>(kb),
                                                  static_cast<uint16_t>(mb), 0, 0, false, 0));
    }
    // B: w rows' NZ (K-block major, C0 stride ncp) is already the ZN layout of w^T.
    for (int32_t done = 0; done < kb * nb;) {
      const int32_t cnt = MinI(255, kb * nb - done);
      AscendC::LoadData(l0b[done * kFractal], bl1,
                        AscendC::LoadData2DParams(static_cast<uint16_t>(done), static_cast<uint8_t>(cnt), 1, 0, 0,
                                                  false, 0));
      done += cnt;
    }
    AscendC::SetFlag<AscendC::HardEvent::MTE1_MTE2>(ev_l1_free_[s]);
    AscendC::SetFlag<AscendC::HardEvent::MTE1_M>(ev_l0_full_[s]);
    AscendC::WaitFlag<AscendC::HardEvent::MTE1_M>(ev_l0_full_[s]);
    if (init && part == 0) AscendC::WaitFlag<AscendC::HardEvent::FIX_M>(ev_fix_m_);   // L0C read out by the last Fixpipe
    AscendC::Mmad(l0c, l0a, l0b,
                  AscendC::MmadParams(static_cast<uint16_t>(tile.mr), static_cast<uint16_t>(ncp),
                                      static_cast<uint16_t>(kw), 0, false, init));
    AscendC::SetFlag<AscendC::HardEvent::M_MTE1>(ev_l0_free_[s]);
  }

  // L0C -> y (scale mode none) or its first `parts` parts -> a workspace slot for the vector cores.
  __aicore__ inline void Emit(const TileOf& tile, int32_t core, int32_t parts) {
    const Args& a = *a_;
    AscendC::LocalTensor<CT> l0c = l0c_.template Get<CT>();
    // L0C holds the tile as NZ with round16(mr) rows per column block (Mmad's m).
    const uint16_t mrp = static_cast<uint16_t>(RoundUpI(tile.mr, 16));
    AscendC::SetFlag<AscendC::HardEvent::M_FIX>(ev_m_fix_);
    AscendC::WaitFlag<AscendC::HardEvent::M_FIX>(ev_m_fix_);
    if (a.t.scale_mode == GgScaleMode::kNone) {
      AscendC::GlobalTensor<OT> gy;
      gy.SetGlobalBuffer(GmPtr<OT>(a.p.addr_y));
      AscendC::FixpipeParamsV220 fp(static_cast<uint16_t>(tile.nc), static_cast<uint16_t>(tile.mr), mrp,
                                    static_cast<uint32_t>(a.t.n), false);
      fp.quantPre = QuantOf();
      AscendC::Fixpipe<OT, CT, AscendC::CFG_ROW_MAJOR>(gy[tile.row0 * a.t.n + tile.n0], l0c, fp);
    } else {
      if (handed_ >= kSlots) AscendC::CrossCoreWaitFlag(kFlagSlotFree);
      AscendC::GlobalTensor<CT> slot;
      slot.SetGlobalBuffer(GmPtr<CT>(a.SlotAddr(core, handed_ % kSlots)),
                           static_cast<uint64_t>(parts_) * part_elems_);
      for (int32_t p = 0; p < parts; ++p) {
        AscendC::Fixpipe<CT, CT, AscendC::CFG_ROW_MAJOR>(
            slot[static_cast<uint64_t>(p) * part_elems_], l0c[p * part_elems_],
            AscendC::FixpipeParamsV220(static_cast<uint16_t>(tile.nc), static_cast<uint16_t>(tile.mr), mrp,
                                       static_cast<uint32_t>(a.t.tile_n), false));
      }
      AscendC::CrossCoreSetFlag<2, PIPE_FIX>(kFlagTileReady);
      ++handed_;
    }
    AscendC::SetFlag<AscendC::HardEvent::FIX_M>(ev_fix_m_);
  }

  __aicore__ inline QuantMode_t QuantOf() const {
    if (IsSameT<OT, half>::value) return QuantMode_t::F322F16;
    if (IsSameT<OT, bfloat16_t>::value) return QuantMode_t::F322BF16;
    return QuantMode_t::NoQuant;
  }

  const Args* a_ = nullptr;
  int32_t mp_ = 16, a_stage_ = 0, b_stage_ = 0;
  int32_t step_ = 0, handed_ = 0, parts_ = 1, part_elems_ = 0;
  AscendC::GlobalTensor<AT> gx_, gw_;
  AscendC::TPipe pipe_;
  AscendC::TBuf<AscendC::TPosition::A1> a_l1_;
  AscendC::TBuf<AscendC::TPosition::B1> b_l1_;
  AscendC::TBuf<AscendC::TPosition::A2> l0a_;
  AscendC::TBuf<AscendC::TPosition::B2> l0b_;
  AscendC::TBuf<AscendC::TPosition::CO1> l0c_;
  AscendC::TEventID ev_l1_free_[2], ev_l1_full_[2], ev_l0_free_[2], ev_l0_full_[2], ev_m_fix_, ev_fix_m_;
};

}  // namespace gg
}  // namespace dualops
