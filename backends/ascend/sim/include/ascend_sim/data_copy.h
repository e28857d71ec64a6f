// Data movement: DataCopy (GM <-> UB / L1, UB -> UB, with DataCopyParams, Nd2NzParams) and
// DataCopyPad. Rules enforced (Atlas A2): GM <-> UB only on a vector core, GM -> L1 only on the
// cube core; local addresses 32-B aligned; DataCopy lengths whole 32-B blocks; every GM byte
// inside a registered buffer.
#pragma once
#include <cstdint>
#include <cstring>

#include "tensor.h"

namespace AscendC {

struct DataCopyParams {
  __aicore__ DataCopyParams() {}
  __aicore__ DataCopyParams(const uint16_t count, const uint16_t len, const uint16_t srcStrideIn,
                            const uint16_t dstStrideIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
  uint16_t blockCount = 1;
  uint16_t blockLen = 0;     // 32-B blocks
  uint16_t srcStride = 0;    // gap between blocks, 32-B blocks
  uint16_t dstStride = 0;
};

struct DataCopyExtParams {
  __aicore__ DataCopyExtParams() {}
  __aicore__ DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn,
                               const uint32_t dstStrideIn, const uint32_t rsvIn)
      : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn) {}
  uint16_t blockCount = 1;
  uint32_t blockLen = 0;     // bytes
  uint32_t srcStride = 0;    // gap: bytes on the GM side, 32-B blocks on the UB side
  uint32_t dstStride = 0;
  uint32_t rsv = 0;
};

struct DataCopyPadParams {
  __aicore__ DataCopyPadParams() {}
  __aicore__ DataCopyPadParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue,
                               const uint64_t padValue)
      : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  uint64_t paddingValue = 0;
};

template <typename T>
struct DataCopyPadExtParams {
  __aicore__ DataCopyPadExtParams() {}
  __aicore__ DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue,
                                  T padValue)
      : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue) {}
  bool isPad = false;
  uint8_t leftPadding = 0;
  uint8_t rightPadding = 0;
  T paddingValue = T(0);
};

struct Nd2NzParams {
  __aicore__ Nd2NzParams() {}
  __aicore__ Nd2NzParams(const uint16_t ndNumIn, const uint16_t nValueIn, const uint16_t dValueIn,
                         const uint16_t srcNdMatrixStrideIn, const uint16_t srcDValueIn,
                         const uint16_t dstNzC0StrideIn, const uint16_t dstNzNStrideIn,
                         const uint16_t dstNzMatrixStrideIn)
      : ndNum(ndNumIn), nValue(nValueIn), dValue(dValueIn), srcNdMatrixStride(srcNdMatrixStrideIn),
        srcDValue(srcDValueIn), dstNzC0Stride(dstNzC0StrideIn), dstNzNStride(dstNzNStrideIn),
        dstNzMatrixStride(dstNzMatrixStrideIn) {}
  uint16_t ndNum = 0;              // matrices
  uint16_t nValue = 0;             // rows per matrix
  uint16_t dValue = 0;             // columns (elements)
  uint16_t srcNdMatrixStride = 0;  // elements between matrices in GM
  uint16_t srcDValue = 0;          // elements between rows in GM
  uint16_t dstNzC0Stride = 0;      // C0 rows (32 B) between column blocks in L1
  uint16_t dstNzNStride = 0;       // C0 rows between consecutive rows in L1
  uint16_t dstNzMatrixStride = 0;  // elements between matrices in L1
};

}  // namespace AscendC

namespace ascend_sim {

inline uint64_t RoundUp32(uint64_t v) { return (v + 31) / 32 * 32; }

// A block copy: `count` blocks of `len` bytes; source / destination pitches in bytes.
struct BlockCopy {
  uint64_t count, len, src_pitch, dst_pitch;
};

template <typename T>
void CheckLocalBytes(const char* api, const char* role, const AscendC::LocalTensor<T>& t, uint64_t end_byte) {
  // end_byte is relative to the tensor start; the tensor's own size bounds it.
  const uint64_t have = static_cast<uint64_t>(t.ref.size) * sizeof(T);
  if (end_byte > have) {
    Fault(api, Str(role, " access reaches byte ", end_byte, " of a ", have, "-byte tensor in ",
                   MemName(t.ref.mem), " (", PositionName(t.ref.pos), ", starting at byte ", t.ref.off, ")"));
  }
}

inline void AllowedLocalCopy(const char* api, Mem src, Mem dst) {
  const CoreContext& c = Cur();
  if (c.kind == CoreKind::AIV) {
    if (!(src == Mem::UB && dst == Mem::UB))
      Fault(api, Str("a vector core copies UB -> UB only, got ", MemName(src), " -> ", MemName(dst)));
  } else {
    Fault(api, Str("a local-to-local DataCopy on the cube core is not an A2 path (", MemName(src), " -> ",
                   MemName(dst), "); move L1 -> L0A/L0B with LoadData"));
  }
}

inline Mem GmInTarget(const char* api) {
  // GM -> local: UB on AIV (MTE2), L1 on AIC (MTE2).
  return Cur().kind == CoreKind::AIV ? Mem::UB : Mem::L1;
}

struct NoPost {
  void operator()() const {}
};

// `post` runs right after the copy, as part of the same instruction (DataCopyPad's padding).
template <typename T, typename Post = NoPost>
void GmToLocal(const char* api, const Loc& loc, const AscendC::LocalTensor<T>& dst, const AscendC::GlobalTensor<T>& src,
               const BlockCopy& bc, Post post = Post()) {
  Enter();
  const Mem want = GmInTarget(api);
  CheckOperand(api, "dst", dst, 0, {want}, 32);
  if (bc.count == 0 || bc.len == 0) return;
  CheckLocalBytes(api, "dst", dst, (bc.count - 1) * bc.dst_pitch + bc.len);
  PipeOp(api, loc, kPMte2, {}, {RngBytes(dst, 0, (bc.count - 1) * bc.dst_pitch + RoundUp32(bc.len))});
  uint8_t* d = reinterpret_cast<uint8_t*>(dst.SimPtr());
  const uint8_t* s = reinterpret_cast<const uint8_t*>(src.SimPtr());
  for (uint64_t i = 0; i < bc.count; ++i) {
    const uint64_t so = i * bc.src_pitch;
    if (so % sizeof(T)) Fault(api, "source pitch is not a whole number of elements");
    src.SimCheck(api, so / sizeof(T), (bc.len + sizeof(T) - 1) / sizeof(T), false);
  }
  Exec([=] {
    for (uint64_t i = 0; i < bc.count; ++i) std::memcpy(d + i * bc.dst_pitch, s + i * bc.src_pitch, bc.len);
    post();
  });
  // After the bounds checks, so an out-of-bounds access is reported as such.
  PipeGm(api, loc, kPMte2, reinterpret_cast<uint64_t>(src.SimPtr()), bc.count, bc.len, bc.src_pitch, false);
}

template <typename T>
void LocalToGm(const char* api, const Loc& loc, const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
               const BlockCopy& bc) {
  Enter();
  RequireCore(api, CoreKind::AIV);   // the cube core writes GM through FIXPIPE only
  CheckOperand(api, "src", src, 0, {Mem::UB}, 32);
  if (bc.count == 0 || bc.len == 0) return;
  CheckLocalBytes(api, "src", src, (bc.count - 1) * bc.src_pitch + bc.len);
  PipeOp(api, loc, kPMte3, {RngBytes(src, 0, (bc.count - 1) * bc.src_pitch + bc.len)}, {});
  const uint8_t* s = reinterpret_cast<const uint8_t*>(src.SimPtr());
  uint8_t* d = reinterpret_cast<uint8_t*>(dst.SimPtr());
  for (uint64_t i = 0; i < bc.count; ++i) {
    const uint64_t dof = i * bc.dst_pitch;
    if (dof % sizeof(T)) Fault(api, "destination pitch is not a whole number of elements");
    dst.SimCheck(api, dof / sizeof(T), (bc.len + sizeof(T) - 1) / sizeof(T), true);
  }
  Exec([=] {
    for (uint64_t i = 0; i < bc.count; ++i) std::memcpy(d + i * bc.dst_pitch, s + i * bc.src_pitch, bc.len);
  });
  PipeGm(api, loc, kPMte3, reinterpret_cast<uint64_t>(dst.SimPtr()), bc.count, bc.len, bc.dst_pitch, true);
}

inline void RequireWholeBlocks(const char* api, uint64_t bytes, const char* what) {
  if (bytes % 32) {
    Fault(api, Str(what, " is ", bytes, " bytes, not a multiple of 32 (use DataCopyPad for unaligned lengths)"));
  }
}

}  // namespace ascend_sim

namespace AscendC {

// ---- contiguous -------------------------------------------------------------------------
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count, ASIM_LOC) {
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
  ascend_sim::RequireWholeBlocks("DataCopy(GM->local)", bytes, "count * sizeof(T)");
  ascend_sim::GmToLocal("DataCopy(GM->local)", asim_loc, dst, src, {1, bytes, bytes, bytes});
}

template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count, ASIM_LOC) {
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
  ascend_sim::RequireWholeBlocks("DataCopy(local->GM)", bytes, "count * sizeof(T)");
  ascend_sim::LocalToGm("DataCopy(local->GM)", asim_loc, dst, src, {1, bytes, bytes, bytes});
}

template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count, ASIM_LOC) {
  const char* api = "DataCopy(local->local)";
  ascend_sim::Enter();
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
  ascend_sim::RequireWholeBlocks(api, bytes, "count * sizeof(T)");
  ascend_sim::CheckOperand(api, "dst", dst, count, {ascend_sim::Mem::UB, ascend_sim::Mem::L1}, 32);
  ascend_sim::CheckOperand(api, "src", src, count, {ascend_sim::Mem::UB, ascend_sim::Mem::L1}, 32);
  ascend_sim::AllowedLocalCopy(api, src.ref.mem, dst.ref.mem);
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPV, {ascend_sim::Rng(src, count)}, {ascend_sim::Rng(dst, count)});
  ascend_sim::Exec([=] { std::memmove(dst.SimPtr(), src.SimPtr(), bytes); });
  ascend_sim::Cur().c.local_copy_bytes += bytes;
}

// ---- strided blocks (DataCopyParams: lengths and gaps in 32-B blocks) --------------------
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p, ASIM_LOC) {
  const uint64_t len = 32ull * p.blockLen;
  ascend_sim::GmToLocal("DataCopy(GM->local, DataCopyParams)", asim_loc, dst, src,
                        {p.blockCount, len, len + 32ull * p.srcStride, len + 32ull * p.dstStride});
}

template <typename T>
__aicore__ inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p, ASIM_LOC) {
  const uint64_t len = 32ull * p.blockLen;
  ascend_sim::LocalToGm("DataCopy(local->GM, DataCopyParams)", asim_loc, dst, src,
                        {p.blockCount, len, len + 32ull * p.srcStride, len + 32ull * p.dstStride});
}

template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p, ASIM_LOC) {
  const char* api = "DataCopy(local->local, DataCopyParams)";
  ascend_sim::Enter();
  ascend_sim::CheckOperand(api, "dst", dst, 0, {ascend_sim::Mem::UB, ascend_sim::Mem::L1}, 32);
  ascend_sim::CheckOperand(api, "src", src, 0, {ascend_sim::Mem::UB, ascend_sim::Mem::L1}, 32);
  ascend_sim::AllowedLocalCopy(api, src.ref.mem, dst.ref.mem);
  if (p.blockCount == 0 || p.blockLen == 0) return;
  const uint64_t len = 32ull * p.blockLen, sp = len + 32ull * p.srcStride, dp = len + 32ull * p.dstStride;
  ascend_sim::CheckLocalBytes(api, "src", src, (p.blockCount - 1) * sp + len);
  ascend_sim::CheckLocalBytes(api, "dst", dst, (p.blockCount - 1) * dp + len);
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPV, {ascend_sim::RngBytes(src, 0, (p.blockCount - 1) * sp + len)},
                     {ascend_sim::RngBytes(dst, 0, (p.blockCount - 1) * dp + len)});
  uint8_t* d = reinterpret_cast<uint8_t*>(dst.SimPtr());
  const uint8_t* s = reinterpret_cast<const uint8_t*>(src.SimPtr());
  ascend_sim::Exec([=] {
    for (uint32_t i = 0; i < p.blockCount; ++i) std::memmove(d + i * dp, s + i * sp, len);
  });
  ascend_sim::Cur().c.local_copy_bytes += len * p.blockCount;
}

// ---- GM (ND) -> L1 (NZ fractals) for the cube ----------------------------------------------
template <typename T>
__aicore__ inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& p, ASIM_LOC) {
  const char* api = "DataCopy(GM->L1, Nd2NzParams)";
  ascend_sim::Enter();
  ascend_sim::RequireCore(api, ascend_sim::CoreKind::AIC);
  ascend_sim::CheckOperand(api, "dst", dst, 0, {ascend_sim::Mem::L1}, 32);
  constexpr uint32_t c0 = 32 / sizeof(T);
  if (p.ndNum == 0 || p.nValue == 0 || p.dValue == 0) return;
  if (p.nValue > 16384) ascend_sim::Fault(api, ascend_sim::Str("nValue ", p.nValue, " exceeds 16384"));
  const uint32_t dblocks = (p.dValue + c0 - 1) / c0;
  // Last element written, to check the L1 extent once.
  const uint64_t last = static_cast<uint64_t>(p.ndNum - 1) * p.dstNzMatrixStride +
                        static_cast<uint64_t>(dblocks - 1) * p.dstNzC0Stride * c0 +
                        static_cast<uint64_t>(p.nValue - 1) * p.dstNzNStride * c0 + c0;
  ascend_sim::CheckLocalBytes(api, "dst", dst, last * sizeof(T));
  ascend_sim::PipeOp(api, asim_loc, ascend_sim::kPMte2, {}, {ascend_sim::Rng(dst, last)});
  for (uint32_t m = 0; m < p.ndNum; ++m)
    for (uint32_t n = 0; n < p.nValue; ++n)
      src.SimCheck(api, static_cast<uint64_t>(m) * p.srcNdMatrixStride + static_cast<uint64_t>(n) * p.srcDValue, p.dValue, false);
  ascend_sim::Exec([=] {
    T* d = dst.SimPtr();
    for (uint32_t m = 0; m < p.ndNum; ++m) {
      for (uint32_t n = 0; n < p.nValue; ++n) {
        const T* s = src.SimPtr(static_cast<uint64_t>(m) * p.srcNdMatrixStride + static_cast<uint64_t>(n) * p.srcDValue);
        for (uint32_t j = 0; j < dblocks * c0; ++j) {
          const uint64_t o = static_cast<uint64_t>(m) * p.dstNzMatrixStride +
                             static_cast<uint64_t>(j / c0) * p.dstNzC0Stride * c0 +
                             static_cast<uint64_t>(n) * p.dstNzNStride * c0 + j % c0;
          // Columns past dValue inside the last C0 block are padded with zeros.
          if (j < p.dValue) d[o] = s[j];
          else std::memset(&d[o], 0, sizeof(T));
        }
      }
    }
  });
  for (uint32_t mi = 0; mi < p.ndNum; ++mi) {   // rows of each matrix, exactly
    ascend_sim::PipeGm(api, asim_loc, ascend_sim::kPMte2,
                       reinterpret_cast<uint64_t>(src.SimPtr(static_cast<uint64_t>(mi) * p.srcNdMatrixStride)), p.nValue,
                       static_cast<uint64_t>(p.dValue) * sizeof(T), static_cast<uint64_t>(p.srcDValue) * sizeof(T), false);
  }
}

// ---- DataCopyPad: byte-exact lengths, rows padded to 32 B on the UB side ------------------
template <typename T>
__aicore__ inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                                   const DataCopyExtParams& p, const DataCopyPadExtParams<T>& pad, ASIM_LOC) {
  const char* api = "DataCopyPad(GM->UB)";
  ascend_sim::Enter();
  ascend_sim::RequireCore(api, ascend_sim::CoreKind::AIV);
  if (p.blockLen % sizeof(T)) ascend_sim::Fault(api, ascend_sim::Str("blockLen ", p.blockLen, " is not a whole number of ", sizeof(T), "-byte elements"));
  if (pad.leftPadding) ascend_sim::Fault(api, "leftPadding is not supported by the simulator");
  const uint64_t pitch = ascend_sim::RoundUp32(p.blockLen) + 32ull * p.dstStride;
  const uint64_t slack = (ascend_sim::RoundUp32(p.blockLen) - p.blockLen) / sizeof(T);
  if (pad.isPad && pad.rightPadding > slack) {
    ascend_sim::Fault(api, ascend_sim::Str("rightPadding ", int(pad.rightPadding), " exceeds the ", slack,
                                           " elements left in the block's last 32 B"));
  }
  auto fill = [=] {
    if (!pad.isPad) return;
    T* d = dst.SimPtr();
    for (uint32_t i = 0; i < p.blockCount; ++i)
      for (uint64_t j = 0; j < slack; ++j) d[(i * pitch + p.blockLen) / sizeof(T) + j] = pad.paddingValue;
  };
  ascend_sim::GmToLocal(api, asim_loc, dst, src, {p.blockCount, p.blockLen, p.blockLen + static_cast<uint64_t>(p.srcStride), pitch},
                        fill);
}

template <typename T>
__aicore__ inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p, ASIM_LOC) {
  const char* api = "DataCopyPad(UB->GM)";
  if (p.blockLen % sizeof(T)) ascend_sim::Fault(api, ascend_sim::Str("blockLen ", p.blockLen, " is not a whole number of ", sizeof(T), "-byte elements"));
  const uint64_t pitch = ascend_sim::RoundUp32(p.blockLen) + 32ull * p.srcStride;
  ascend_sim::LocalToGm(api, asim_loc, dst, src, {p.blockCount, p.blockLen, pitch, p.blockLen + static_cast<uint64_t>(p.dstStride)});
}

// The older DataCopyParams (blockLen in bytes here) + DataCopyPadParams spelling.
template <typename T>
__aicore__ inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p,
                                   const DataCopyPadParams& pad, ASIM_LOC) {
  T v;
  std::memcpy(&v, &pad.paddingValue, sizeof(T));
  DataCopyPad(dst, src, DataCopyExtParams(p.blockCount, p.blockLen, p.srcStride, p.dstStride, 0),
              DataCopyPadExtParams<T>(pad.isPad, pad.leftPadding, pad.rightPadding, v), asim_loc);
}

template <typename T>
__aicore__ inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p, ASIM_LOC) {
  DataCopyPad(dst, src, DataCopyExtParams(p.blockCount, p.blockLen, p.srcStride, p.dstStride, 0), asim_loc);
}

}  // namespace AscendC
