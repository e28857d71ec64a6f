// GlobalTensor (a typed view of GM) and LocalTensor (a typed view of one on-chip buffer).
// Every access is bounds-checked: GM against the buffers the launcher registered (and the
// size given to SetGlobalBuffer), local memory against the allocation the tensor came from.
#pragma once
#include <cstdint>
#include <type_traits>

#include "numerics.h"
#include "runtime.h"

namespace ascend_sim {

// Where a LocalTensor points: physical buffer, logical position, byte offset, size in
// elements, and the [lo, hi) byte extent of the TPipe allocation it was carved from.
struct LocalRef {
  Mem mem = Mem::NONE;
  AscendC::TPosition pos = AscendC::TPosition::MAX;
  uint32_t off = 0;
  uint32_t size = 0;
  uint32_t lo = 0, hi = 0;
};

template <typename T>
constexpr const char* TypeName() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, half>) return "half";
  else if constexpr (std::is_same_v<T, bfloat16_t>) return "bfloat16_t";
  else if constexpr (std::is_same_v<T, int8_t>) return "int8_t";
  else if constexpr (std::is_same_v<T, uint8_t>) return "uint8_t";
  else if constexpr (std::is_same_v<T, int16_t>) return "int16_t";
  else if constexpr (std::is_same_v<T, uint16_t>) return "uint16_t";
  else if constexpr (std::is_same_v<T, int32_t>) return "int32_t";
  else if constexpr (std::is_same_v<T, uint32_t>) return "uint32_t";
  else if constexpr (std::is_same_v<T, int64_t>) return "int64_t";
  else if constexpr (std::is_same_v<T, uint64_t>) return "uint64_t";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else return "T";
}

}  // namespace ascend_sim

namespace AscendC {

template <typename T>
class GlobalTensor {
 public:
  __aicore__ inline GlobalTensor() {}
  __aicore__ inline void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize) {
    addr_ = buffer;
    size_ = bufferSize;
    sized_ = true;
  }
  __aicore__ inline void SetGlobalBuffer(__gm__ T* buffer) {
    addr_ = buffer;
    size_ = 0;
    sized_ = false;
  }
  __aicore__ inline const __gm__ T* GetPhyAddr() const { return addr_; }
  __aicore__ inline __gm__ T* GetPhyAddr(const uint64_t offset) const { return addr_ + offset; }
  __aicore__ inline uint64_t GetSize() const { return size_; }
  __aicore__ inline void SetL2CacheHint(CacheMode) {}

  __aicore__ inline GlobalTensor operator[](const uint64_t offset) const {
    GlobalTensor t;
    t.addr_ = addr_ + offset;
    t.sized_ = sized_;
    t.over_ = over_ || (sized_ && offset > size_);
    t.size_ = (sized_ && !t.over_) ? size_ - offset : 0;
    return t;
  }

  // Scalar access through the scalar unit's data cache (counted as GM traffic).
  __aicore__ inline T GetValue(const uint64_t offset) const {
    ascend_sim::Enter();
    SimCheck("GlobalTensor::GetValue", offset, 1, false);
    ascend_sim::Cur().c.scalar_gm_accesses += 1;
    return addr_[offset];
  }
  __aicore__ inline void SetValue(const uint64_t offset, const T& value) {
    ascend_sim::Enter();
    SimCheck("GlobalTensor::SetValue", offset, 1, true);
    ascend_sim::Cur().c.scalar_gm_accesses += 1;
    addr_[offset] = value;
  }

  // --- simulator side -------------------------------------------------------------------
  // Elements [offset, offset + count) must lie inside the declared size (when one was
  // given) and inside a registered GM buffer.
  void SimCheck(const char* api, uint64_t offset, uint64_t count, bool write) const {
    if (addr_ == nullptr) ascend_sim::Fault(api, "GlobalTensor has no buffer (SetGlobalBuffer was not called)");
    if (sized_ && (over_ || offset + count > size_)) {
      ascend_sim::Fault(api, ascend_sim::Str("elements [", offset, ", ", offset + count,
                                             ") of a GlobalTensor<", ascend_sim::TypeName<T>(),
                                             "> whose SetGlobalBuffer size is ", size_));
    }
    ascend_sim::GmAccess(api, SimPtr(offset), count * sizeof(T), write);
  }
  // The host address behind the GM pointer (a C-style cast: the only way out of the GM address
  // space under the strict qualifier check).
  T* SimPtr(uint64_t offset = 0) const { return (T*)(addr_ + offset); }

 private:
  __gm__ T* addr_ = nullptr;
  uint64_t size_ = 0;
  bool sized_ = false;
  bool over_ = false;
};

template <typename T>
class LocalTensor {
 public:
  using PrimType = T;
  __aicore__ inline LocalTensor() {}

  __aicore__ inline T GetValue(const uint32_t index, ASIM_LOC) const {
    ascend_sim::Enter();
    SimScalar("LocalTensor::GetValue", index);
    SimPipe("LocalTensor::GetValue", asim_loc, index, false);
    return SimPtr()[index];
  }
  __aicore__ inline void SetValue(const uint32_t index, const T value, ASIM_LOC) const {
    ascend_sim::Enter();
    SimScalar("LocalTensor::SetValue", index);
    SimPipe("LocalTensor::SetValue", asim_loc, index, true);
    SimPtr()[index] = value;
  }

  __aicore__ inline LocalTensor operator[](const uint32_t offset) const {
    SimValid("LocalTensor::operator[]");
    if (offset > ref.size) {
      ascend_sim::Fault("LocalTensor::operator[]",
                        ascend_sim::Str("offset ", offset, " is past the end of a ", ref.size,
                                        "-element tensor in ", ascend_sim::PositionName(ref.pos)));
    }
    LocalTensor t = *this;
    t.ref.off += offset * sizeof(T);
    t.ref.size -= offset;
    return t;
  }

  template <typename U>
  __aicore__ inline LocalTensor<U> ReinterpretCast() const {
    LocalTensor<U> t;
    t.ref = ref;
    t.ref.size = static_cast<uint32_t>((static_cast<uint64_t>(ref.size) * sizeof(T)) / sizeof(U));
    return t;
  }

  __aicore__ inline uint32_t GetSize() const { return ref.size; }
  __aicore__ inline uint32_t GetLength() const { return ref.size * sizeof(T); }
  __aicore__ inline void SetSize(const uint32_t size) {
    SimValid("LocalTensor::SetSize");
    if (ref.off + static_cast<uint64_t>(size) * sizeof(T) > ref.hi) {
      ascend_sim::Fault("LocalTensor::SetSize",
                        ascend_sim::Str("size ", size, " x ", sizeof(T), " B from byte ", ref.off,
                                        " runs past its buffer's end at byte ", ref.hi, " of ",
                                        ascend_sim::MemName(ref.mem)));
    }
    ref.size = size;
  }
  __aicore__ inline uint64_t GetPhyAddr() const { return ref.off; }
  __aicore__ inline TPosition GetPosition() const { return ref.pos; }

  // --- simulator side -------------------------------------------------------------------
  ascend_sim::LocalRef ref;

  bool SimIsValid() const { return ref.mem != ascend_sim::Mem::NONE; }
  void SimValid(const char* api) const {
    if (!SimIsValid()) ascend_sim::Fault(api, "LocalTensor was never allocated (AllocTensor / TBuf::Get)");
  }
  T* SimPtr() const {
    ascend_sim::CoreContext& c = ascend_sim::Cur();
    uint8_t* base = c.mem[static_cast<int>(ref.mem)];
    if (base == nullptr) {
      ascend_sim::Fault("LocalTensor", ascend_sim::Str("tensor lives in ", ascend_sim::MemName(ref.mem),
                                                        ", which a ", c.name.substr(0, 3), " core does not have"));
    }
    return reinterpret_cast<T*>(base + ref.off);
  }
  void SimPipe(const char* api, const ascend_sim::Loc& loc, uint32_t index, bool write) const {
    const ascend_sim::Range r{static_cast<int>(ref.mem), static_cast<uint32_t>(ref.off + index * sizeof(T)),
                              static_cast<uint32_t>(ref.off + (index + 1) * sizeof(T))};
    if (write) ascend_sim::PipeOp(api, loc, ascend_sim::kPS, {}, {r});
    else ascend_sim::PipeOp(api, loc, ascend_sim::kPS, {r}, {});
  }
  void SimScalar(const char* api, uint32_t index) const {
    SimValid(api);
    if (ref.mem != ascend_sim::Mem::UB) {
      ascend_sim::Fault(api, ascend_sim::Str("the scalar unit reaches UB only, this tensor is in ",
                                             ascend_sim::MemName(ref.mem)));
    }
    if (index >= ref.size) {
      ascend_sim::Fault(api, ascend_sim::Str("index ", index, " out of range for a ", ref.size,
                                             "-element tensor"));
    }
  }
};

}  // namespace AscendC

namespace ascend_sim {

// Common operand check: the tensor is allocated, lives in one of the allowed buffers, starts
// at the required alignment and holds at least `count` elements.
template <typename T>
void CheckOperand(const char* api, const char* role, const AscendC::LocalTensor<T>& t, uint64_t count,
                  std::initializer_list<Mem> allowed, uint32_t align) {
  if (!t.SimIsValid()) Fault(api, Str(role, " tensor was never allocated"));
  bool ok = false;
  for (Mem m : allowed) ok = ok || (m == t.ref.mem);
  if (!ok) {
    std::string names;
    for (Mem m : allowed) names += (names.empty() ? "" : "/") + std::string(MemName(m));
    Fault(api, Str(role, " must be in ", names, ", got a tensor in ", MemName(t.ref.mem), " (",
                   PositionName(t.ref.pos), ")"));
  }
  if (Cur().mem[static_cast<int>(t.ref.mem)] == nullptr) {
    Fault(api, Str(role, " is in ", MemName(t.ref.mem), ", which this ", Cur().name.substr(0, 3),
                   " core does not have"));
  }
  if (align && t.ref.off % align) {
    Fault(api, Str(role, " starts at byte ", t.ref.off, " of ", MemName(t.ref.mem), ", not ", align,
                   "-byte aligned"));
  }
  if (count > t.ref.size) {
    Fault(api, Str(role, " needs ", count, " elements of ", TypeName<T>(), " but the tensor holds ",
                   t.ref.size, " (", MemName(t.ref.mem), " bytes [", t.ref.off, ", ",
                   t.ref.off + t.ref.size * sizeof(T), "))"));
  }
}

// The byte range of `count` elements of t, for the pipe model (pipes.h).
template <typename T>
Range Rng(const AscendC::LocalTensor<T>& t, uint64_t count) {
  return Range{static_cast<int>(t.ref.mem), t.ref.off, static_cast<uint32_t>(t.ref.off + count * sizeof(T))};
}
template <typename T>
Range RngBytes(const AscendC::LocalTensor<T>& t, uint64_t lo, uint64_t hi) {
  return Range{static_cast<int>(t.ref.mem), static_cast<uint32_t>(t.ref.off + lo), static_cast<uint32_t>(t.ref.off + hi)};
}

inline void RequireCore(const char* api, CoreKind kind) {
  CoreContext& c = Cur();
  if (c.kind != kind) {
    Fault(api, Str("runs only on ", kind == CoreKind::AIC ? "the cube core (AIC)" : "a vector core (AIV)",
                   ", called on ", c.name));
  }
}

}  // namespace ascend_sim
