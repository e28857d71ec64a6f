// The vector-core (AIV) epilogue of the scaled grouped GEMM: each tile the cube leaves in the AI
// core's workspace slot (fp32, or int32 for int8) is dequantized and written to y. The two
// vector cores split the tile's rows.
//   per_tensor:  y = acc * w_scale[g] (* x_scale[0])
//   rowwise:     y = acc * x_scale[row] * w_scale[g, col]   (int8: int32 acc -> fp32 first)
//   blockwise:   acc += partial_kb * x_scale[row, kb] * w_scale[g, nt, kb] per 128-wide K slice,
//                in fp32 in UB; y = acc after the last slice
#pragma once
#include "ascend/grouped_gemm/gg_common.h"

namespace dualops {
namespace gg {

constexpr int32_t kEpiChunkFloats = 8192;   // rows of a slot handled at once (32 KB of fp32)

template <typename CT, typename OT>
class GgEpilogue {
 public:
  __aicore__ inline void Init(const Args& a) {
    a_ = &a;
    pitch_ = a.t.tile_n;   // UB row pitch (elements), a multiple of 16
    half_rows_ = CeilDivI(a.t.tile_m, 2);
    chunk_rows_ = a.t.scale_mode == GgScaleMode::kBlockwise ? half_rows_ : MaxI(1, MinI(half_rows_, kEpiChunkFloats / pitch_));
    const uint32_t elems = static_cast<uint32_t>(chunk_rows_ * pitch_);
    pipe_.InitBuffer(raw_, elems * sizeof(CT));
    pipe_.InitBuffer(f32_, elems * sizeof(float));
    pipe_.InitBuffer(out_, elems * sizeof(OT));
    pipe_.InitBuffer(wsc_, pitch_ * sizeof(float));
    if (a.t.scale_mode == GgScaleMode::kBlockwise) pipe_.InitBuffer(acc_, elems * sizeof(float));
    gy_.SetGlobalBuffer(GmPtr<OT>(a.p.addr_y));
    gxs_.SetGlobalBuffer(GmPtr<float>(a.p.addr_xs));
    gws_.SetGlobalBuffer(GmPtr<float>(a.p.addr_ws));
  }

  __aicore__ inline void Process() {
    const Args& a = *a_;
    const int32_t core = static_cast<int32_t>(AscendC::GetBlockIdx() / AscendC::GetSubBlockNum());
    const int32_t sub = static_cast<int32_t>(AscendC::GetSubBlockIdx());
    for (int32_t i = core; i < a.t.num_items; i += a.t.num_cores) {
      TileOf tile;
      tile.Decode(a, i);
      if (tile.mr == 0) continue;
      const int32_t h = CeilDivI(tile.mr, 2);
      const int32_t r_begin = sub == 0 ? 0 : h;
      const int32_t r_end = sub == 0 ? h : tile.mr;
      if (a.t.scale_mode == GgScaleMode::kBlockwise) {
        const int32_t parts = PartsPerHandOff(a.t);
        for (int32_t k0 = 0; k0 < a.t.num_k_tiles; k0 += parts) {
          AscendC::CrossCoreWaitFlag(kFlagTileReady);
          for (int32_t p = 0; p < parts && k0 + p < a.t.num_k_tiles; ++p) {
            if (r_end > r_begin) Accumulate(tile, core, r_begin, r_end - r_begin, k0 + p, p);
          }
          Release();
        }
        if (r_end > r_begin) Store(acc_.Get<float>(), tile, r_begin, r_end - r_begin);
        continue;
      }
      AscendC::CrossCoreWaitFlag(kFlagTileReady);
      if (a.t.scale_mode == GgScaleMode::kRowwise) LoadWScaleRow(tile);
      for (int32_t r = r_begin; r < r_end; r += chunk_rows_) {
        const int32_t rows = MinI(chunk_rows_, r_end - r);
        LoadSlot(tile, core, r, rows, 0);
        AscendC::LocalTensor<float> f = f32_.Get<float>();
        ScaleRows(f, tile, r, rows);
        Store(f, tile, r, rows);
      }
      Release();
    }
  }

 private:
  template <AscendC::HardEvent E>
  __aicore__ inline void Sync() {
    const AscendC::TEventID id = pipe_.FetchEventID(E);
    AscendC::SetFlag<E>(id);
    AscendC::WaitFlag<E>(id);
  }

  __aicore__ inline void Release() {
    ++taken_;
    AscendC::CrossCoreSetFlag<2, PIPE_MTE2>(kFlagSlotFree);
  }

  // Rows [r, r + rows) of part `part` of the tile in this core's current slot -> fp32 in UB
  // (pitch_ per row).
  __aicore__ inline void LoadSlot(const TileOf& tile, int32_t core, int32_t r, int32_t rows, int32_t part) {
    const Args& a = *a_;
    AscendC::GlobalTensor<CT> slot;
    const uint64_t part_elems = static_cast<uint64_t>(RoundUpI(a.t.tile_m, 16)) * a.t.tile_n;
    slot.SetGlobalBuffer(GmPtr<CT>(a.SlotAddr(core, taken_ % kSlots)), PartsPerHandOff(a.t) * part_elems);
    AscendC::LocalTensor<CT> raw = raw_.Get<CT>();
    const uint32_t len = static_cast<uint32_t>(tile.nc * sizeof(CT));
    const uint32_t ub_gap = (static_cast<uint32_t>(pitch_ * sizeof(CT)) - (len + 31) / 32 * 32) / 32;
    AscendC::DataCopyPad(raw, slot[part * part_elems + static_cast<uint64_t>(r) * a.t.tile_n],
                         AscendC::DataCopyExtParams(static_cast<uint16_t>(rows), len,
                                                    static_cast<uint32_t>((a.t.tile_n - tile.nc) * sizeof(CT)), ub_gap, 0),
                         AscendC::DataCopyPadExtParams<CT>(false, 0, 0, CT(0)));
    Sync<AscendC::HardEvent::MTE2_V>();
    AscendC::LocalTensor<float> f = f32_.Get<float>();
    if constexpr (IsSameT<CT, int32_t>::value) {
      AscendC::Cast(f, raw.template ReinterpretCast<int32_t>(), AscendC::RoundMode::CAST_NONE, rows * pitch_);
    } else {
      AscendC::Adds(f, raw.template ReinterpretCast<float>(), 0.0f, rows * pitch_);
    }
    AscendC::PipeBarrier<PIPE_V>();
  }

  __aicore__ inline void LoadWScaleRow(const TileOf& tile) {
    AscendC::DataCopyPad(wsc_.Get<float>(), gws_[static_cast<uint64_t>(tile.g) * a_->t.n + tile.n0],
                         AscendC::DataCopyExtParams(1, static_cast<uint32_t>(tile.nc * sizeof(float)), 0, 0, 0),
                         AscendC::DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
    Sync<AscendC::HardEvent::MTE2_V>();
  }

  __aicore__ inline void ScaleRows(const AscendC::LocalTensor<float>& f, const TileOf& tile, int32_t r, int32_t rows) {
    const Args& a = *a_;
    if (a.t.scale_mode == GgScaleMode::kPerTensor) {
      float s = gws_.GetValue(tile.g);
      if (a.p.addr_xs != 0) s *= gxs_.GetValue(0);
      AscendC::Muls(f, f, s, rows * pitch_);
      AscendC::PipeBarrier<PIPE_V>();
      return;
    }
    AscendC::LocalTensor<float> wsc = wsc_.Get<float>();
    for (int32_t j = 0; j < rows; ++j) {
      const float xs = gxs_.GetValue(static_cast<uint64_t>(tile.row0 + r + j));
      AscendC::Muls(f[j * pitch_], f[j * pitch_], xs, tile.nc);
      AscendC::PipeBarrier<PIPE_V>();
      AscendC::Mul(f[j * pitch_], f[j * pitch_], wsc, tile.nc);
    }
    AscendC::PipeBarrier<PIPE_V>();
  }

  // acc (+)= slice kt's partial * x_scale[row, kt] * w_scale[g, nt, kt].
  __aicore__ inline void Accumulate(const TileOf& tile, int32_t core, int32_t r, int32_t rows, int32_t kt, int32_t part) {
    const Args& a = *a_;
    const int32_t kb = a.t.num_k_tiles;
    LoadSlot(tile, core, r, rows, part);
    AscendC::LocalTensor<float> f = f32_.Get<float>();
    AscendC::LocalTensor<float> acc = acc_.Get<float>();
    const float ws = gws_.GetValue((static_cast<uint64_t>(tile.g) * a.t.num_n_tiles + tile.nt) * kb + kt);
    for (int32_t j = 0; j < rows; ++j) {
      const float s = ws * gxs_.GetValue(static_cast<uint64_t>(tile.row0 + r + j) * kb + kt);
      if (kt == 0) {
        AscendC::Muls(acc[j * pitch_], f[j * pitch_], s, tile.nc);
      } else {
        AscendC::Muls(f[j * pitch_], f[j * pitch_], s, tile.nc);
        AscendC::PipeBarrier<PIPE_V>();
        AscendC::Add(acc[j * pitch_], acc[j * pitch_], f[j * pitch_], tile.nc);
      }
    }
    AscendC::PipeBarrier<PIPE_V>();
    Sync<AscendC::HardEvent::V_MTE2>();   // raw / f are reloaded by the next slice
  }

  // fp32 rows -> the output dtype -> y rows [row0 + r, + rows), columns [n0, n0 + nc).
  __aicore__ inline void Store(const AscendC::LocalTensor<float>& f, const TileOf& tile, int32_t r, int32_t rows) {
    const Args& a = *a_;
    AscendC::LocalTensor<OT> o = out_.Get<OT>();
    if constexpr (IsSameT<OT, float>::value) {
      AscendC::Adds(o.template ReinterpretCast<float>(), f, 0.0f, rows * pitch_);
    } else {
      AscendC::Cast(o, f, AscendC::RoundMode::CAST_RINT, rows * pitch_);
    }
    Sync<AscendC::HardEvent::V_MTE3>();
    const uint32_t len = static_cast<uint32_t>(tile.nc * sizeof(OT));
    const uint32_t ub_gap = (static_cast<uint32_t>(pitch_ * sizeof(OT)) - (len + 31) / 32 * 32) / 32;
    AscendC::DataCopyPad(gy_[static_cast<uint64_t>(tile.row0 + r) * a.t.n + tile.n0], o,
                         AscendC::DataCopyExtParams(static_cast<uint16_t>(rows), len, ub_gap,
                                                    static_cast<uint32_t>((a.t.n - tile.nc) * sizeof(OT)), 0));
    Sync<AscendC::HardEvent::MTE3_V>();
    Sync<AscendC::HardEvent::MTE3_MTE2>();
  }

  const Args* a_ = nullptr;
  int32_t pitch_ = 16, half_rows_ = 1, chunk_rows_ = 1, taken_ = 0;
  AscendC::GlobalTensor<OT> gy_;
  AscendC::GlobalTensor<float> gxs_, gws_;
  AscendC::TPipe pipe_;
  AscendC::TBuf<AscendC::TPosition::VECCALC> raw_, f32_, out_, wsc_, acc_;
};

}  // namespace gg
}  // namespace dualops
