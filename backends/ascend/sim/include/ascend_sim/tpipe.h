// TPipe / TQue / TBuf: on-chip buffer allocation with the real capacities, and the queue
// discipline (AllocTensor -> EnQue -> DeQue -> FreeTensor) checked on every call.
#pragma once
#include <cstdint>

#include "tensor.h"

namespace ascend_sim {

// State of one TQue or TBuf (non-template, so the checks live in sim_tpipe.cpp).
struct QueueState {
  enum BufState : uint8_t { kFree, kAllocated, kEnqueued, kDequeued };
  static constexpr int kMaxBufs = 8;
  bool initialized = false;
  bool is_tbuf = false;
  AscendC::TPosition pos = AscendC::TPosition::MAX;
  Mem mem = Mem::NONE;
  int32_t depth = 0;
  int32_t num = 0;
  uint32_t len = 0;                 // bytes per buffer (aligned)
  uint32_t base[kMaxBufs] = {};
  BufState state[kMaxBufs] = {};
  int32_t fifo[kMaxBufs] = {};      // enqueued buffer indices, oldest first
  int32_t fifo_len = 0;
  const void* pipe = nullptr;
  // Asynchronous pipes: the producer / consumer pipes of the position (EnQue orders the
  // consumer after the producer, FreeTensor -> AllocTensor the producer after the consumer).
  int8_t prod = -1, cons = -1;
  Snap enq[kMaxBufs], fre[kMaxBufs];
};

void PipeCreate(void* pipe);
void PipeDestroy(void* pipe);
void PipeReset(void* pipe);
void QueueInit(const char* api, void* pipe, QueueState& q, AscendC::TPosition pos, int32_t depth, int32_t num,
               uint32_t len, bool is_tbuf);
// Index of a buffer handed out by AllocTensor; faults (queue exhausted) naming the queue.
int32_t QueueAlloc(const char* api, QueueState& q);
void QueueEnque(const char* api, QueueState& q, const LocalRef& r);
int32_t QueueDeque(const char* api, QueueState& q);
void QueueFree(const char* api, QueueState& q, const LocalRef& r);
LocalRef QueueRef(const QueueState& q, int32_t idx, uint32_t elem_bytes);
LocalRef TBufRef(const char* api, const QueueState& q, uint32_t offset_bytes, uint64_t bytes, uint32_t elem_bytes);
int32_t PipeAllocEvent(const char* api, void* pipe, AscendC::HardEvent evt);
void PipeReleaseEvent(const char* api, void* pipe, AscendC::HardEvent evt, int32_t id);

}  // namespace ascend_sim

namespace AscendC {

class TPipe;

template <TPosition pos, int32_t depth, auto mask = 0>
class TQue {
 public:
  __aicore__ inline TQue() = default;
  TQue(const TQue&) = delete;
  TQue& operator=(const TQue&) = delete;

  template <typename T>
  __aicore__ inline LocalTensor<T> AllocTensor() {
    ascend_sim::Enter();
    LocalTensor<T> t;
    t.ref = ascend_sim::QueueRef(sim, ascend_sim::QueueAlloc("TQue::AllocTensor", sim), sizeof(T));
    return t;
  }
  template <typename T>
  __aicore__ inline void AllocTensor(LocalTensor<T>& tensor) { tensor = AllocTensor<T>(); }
  template <typename T>
  __aicore__ inline void FreeTensor(LocalTensor<T>& tensor) {
    ascend_sim::Enter();
    ascend_sim::QueueFree("TQue::FreeTensor", sim, tensor.ref);
  }
  template <typename T>
  __aicore__ inline bool EnQue(const LocalTensor<T>& tensor) {
    ascend_sim::Enter();
    ascend_sim::QueueEnque("TQue::EnQue", sim, tensor.ref);
    return true;
  }
  template <typename T>
  __aicore__ inline LocalTensor<T> DeQue() {
    ascend_sim::Enter();
    LocalTensor<T> t;
    t.ref = ascend_sim::QueueRef(sim, ascend_sim::QueueDeque("TQue::DeQue", sim), sizeof(T));
    return t;
  }
  template <typename T>
  __aicore__ inline void DeQue(LocalTensor<T>& tensor) { tensor = DeQue<T>(); }
  __aicore__ inline bool VacantInQue() { return sim.fifo_len < depth; }
  __aicore__ inline bool HasTensorInQue() { return sim.fifo_len > 0; }
  __aicore__ inline int32_t GetTensorCountInQue() { return sim.fifo_len; }
  __aicore__ inline bool HasIdleBuffer() {
    for (int32_t i = 0; i < sim.num; ++i)
      if (sim.state[i] == ascend_sim::QueueState::kFree) return true;
    return false;
  }
  __aicore__ inline void FreeAllEvent() {}

  static constexpr TPosition kPos = pos;
  static constexpr int32_t kDepth = depth;
  static constexpr bool kIsTBuf = false;
  ascend_sim::QueueState sim;
};

template <TPosition pos = TPosition::LCM>
class TBuf {
 public:
  __aicore__ inline TBuf() = default;
  TBuf(const TBuf&) = delete;
  TBuf& operator=(const TBuf&) = delete;

  template <typename T>
  __aicore__ inline LocalTensor<T> Get() {
    ascend_sim::Enter();
    LocalTensor<T> t;
    t.ref = ascend_sim::TBufRef("TBuf::Get", sim, 0, sim.len, sizeof(T));
    return t;
  }
  template <typename T>
  __aicore__ inline LocalTensor<T> Get(uint32_t len) {
    ascend_sim::Enter();
    LocalTensor<T> t;
    t.ref = ascend_sim::TBufRef("TBuf::Get", sim, 0, static_cast<uint64_t>(len) * sizeof(T), sizeof(T));
    return t;
  }
  template <typename T>
  __aicore__ inline LocalTensor<T> GetWithOffset(uint32_t size, uint32_t bufOffset) {
    ascend_sim::Enter();
    LocalTensor<T> t;
    t.ref = ascend_sim::TBufRef("TBuf::GetWithOffset", sim, bufOffset,
                                static_cast<uint64_t>(size) * sizeof(T), sizeof(T));
    return t;
  }

  static constexpr TPosition kPos = pos;
  static constexpr int32_t kDepth = 0;
  static constexpr bool kIsTBuf = true;
  ascend_sim::QueueState sim;
};

class TPipe {
 public:
  __aicore__ inline TPipe() { ascend_sim::PipeCreate(this); }
  __aicore__ inline ~TPipe() { ascend_sim::PipeDestroy(this); }
  TPipe(const TPipe&) = delete;
  TPipe& operator=(const TPipe&) = delete;

  template <class Q>
  __aicore__ inline bool InitBuffer(Q& que, uint8_t num, uint32_t len) {
    static_assert(!Q::kIsTBuf, "InitBuffer(que, num, len) takes a TQue; a TBuf takes InitBuffer(buf, len)");
    ascend_sim::Enter();
    ascend_sim::QueueInit("TPipe::InitBuffer", this, que.sim, Q::kPos, Q::kDepth, num, len, false);
    return true;
  }
  template <TPosition bufPos>
  __aicore__ inline bool InitBuffer(TBuf<bufPos>& buf, uint32_t len) {
    ascend_sim::Enter();
    ascend_sim::QueueInit("TPipe::InitBuffer", this, buf.sim, bufPos, 0, 1, len, true);
    return true;
  }
  __aicore__ inline void Reset() { ascend_sim::PipeReset(this); }
  __aicore__ inline void Destroy() { ascend_sim::PipeReset(this); }

  template <HardEvent evt>
  __aicore__ inline TEventID AllocEventID() {
    ascend_sim::Enter();
    return static_cast<TEventID>(ascend_sim::PipeAllocEvent("TPipe::AllocEventID", this, evt));
  }
  template <HardEvent evt>
  __aicore__ inline void ReleaseEventID(TEventID id) {
    ascend_sim::Enter();
    ascend_sim::PipeReleaseEvent("TPipe::ReleaseEventID", this, evt, id);
  }
  // A free id, without reserving it (CANN's FetchEventID).
  template <HardEvent evt>
  __aicore__ inline TEventID FetchEventID() {
    ascend_sim::Enter();
    const int32_t id = ascend_sim::PipeAllocEvent("TPipe::FetchEventID", this, evt);
    ascend_sim::PipeReleaseEvent("TPipe::FetchEventID", this, evt, id);
    return static_cast<TEventID>(id);
  }
  __aicore__ inline TEventID FetchEventID(HardEvent evt) {
    ascend_sim::Enter();
    const int32_t id = ascend_sim::PipeAllocEvent("TPipe::FetchEventID", this, evt);
    ascend_sim::PipeReleaseEvent("TPipe::FetchEventID", this, evt, id);
    return static_cast<TEventID>(id);
  }

  // simulator side: event ids reserved per HardEvent (bit mask of 8 ids).
  uint8_t sim_event_ids[64] = {};
};

}  // namespace AscendC

// The core's live TPipe (CANN keeps one global per core; declared at global scope, as in CANN's
// kernel_common.h: `AscendC::GetTPipePtr()` does not compile there, nor here).
AscendC::TPipe* GetTPipePtr();
