// TPipe buffer allocation against the real capacities, and the TQue state machine.
#include "ascend_sim/tpipe.h"

#include "launch_state.h"

namespace ascend_sim {

namespace {

const char* StateName(QueueState::BufState s) {
  switch (s) {
    case QueueState::kFree: return "free";
    case QueueState::kAllocated: return "allocated";
    case QueueState::kEnqueued: return "in the queue";
    case QueueState::kDequeued: return "dequeued";
  }
  return "?";
}

std::string QueName(const QueueState& q) {
  return Str(q.is_tbuf ? "TBuf<" : "TQue<", PositionName(q.pos), ">");
}

int32_t FindBuffer(const QueueState& q, const LocalRef& r) {
  if (r.mem != q.mem) return -1;
  for (int32_t i = 0; i < q.num; ++i)
    if (q.base[i] == r.off) return i;
  return -1;
}

}  // namespace

void PipeCreate(void* pipe) {
  CoreContext& c = Cur();
  if (c.pipe != nullptr) {
    Fault("TPipe::TPipe", "a TPipe is already live on this core: a kernel owns one TPipe at a time");
  }
  c.pipe = pipe;
  for (auto& t : c.top) t = 0;
}

void PipeDestroy(void* pipe) {
  // Runs during unwinding too: must not throw.
  CoreContext* c = CurOrNull();
  if (c && c->pipe == pipe) {
    c->pipe = nullptr;
    for (auto& t : c->top) t = 0;
  }
}

void PipeReset(void* pipe) {
  CoreContext& c = Cur();
  if (c.pipe == pipe) for (auto& t : c.top) t = 0;
}

void QueueInit(const char* api, void* pipe, QueueState& q, AscendC::TPosition pos, int32_t depth, int32_t num,
               uint32_t len, bool is_tbuf) {
  CoreContext& c = Cur();
  if (c.pipe != pipe) Fault(api, "this TPipe is not the live TPipe of the core");
  q.pos = pos;
  q.is_tbuf = is_tbuf;
  if (q.initialized) Fault(api, Str(QueName(q), " was already given buffers (InitBuffer called twice)"));
  const Mem mem = PositionMem(pos);
  if (mem == Mem::NONE) Fault(api, Str("position ", PositionName(pos), " holds no on-chip buffer on Atlas A2"));
  const int mi = static_cast<int>(mem);
  if (c.mem[mi] == nullptr) {
    Fault(api, Str(QueName(q), " needs ", MemName(mem), ", which a ",
                   c.kind == CoreKind::AIC ? "cube core (AIC)" : "vector core (AIV)", " does not have"));
  }
  if (num < 1 || num > QueueState::kMaxBufs) Fault(api, Str("num must be in [1, ", QueueState::kMaxBufs, "], got ", num));
  if (len == 0) Fault(api, "len must be > 0");
  if (!is_tbuf && depth < 1) Fault(api, Str("queue depth must be >= 1, got ", depth));
  const uint32_t align = MemAlign(mem);
  const uint64_t blen = (static_cast<uint64_t>(len) + 31) / 32 * 32;   // lengths round up to 32 B
  const uint64_t start = (static_cast<uint64_t>(c.top[mi]) + align - 1) / align * align;
  const uint64_t end = start + blen * static_cast<uint64_t>(num);
  if (end > c.cap[mi]) {
    Fault(api, Str(QueName(q), " of ", num, " x ", blen, " B needs ", MemName(mem), " bytes [", start, ", ", end,
                   ") but the ", MemName(mem), " of this core holds ", c.cap[mi], " B (",
                   c.launch->cfg.profile, "); ", c.top[mi], " B are already taken"));
  }
  q.mem = mem;
  q.depth = depth;
  q.num = num;
  q.len = static_cast<uint32_t>(blen);
  for (int32_t i = 0; i < num; ++i) {
    q.base[i] = static_cast<uint32_t>(start + blen * i);
    q.state[i] = QueueState::kFree;
  }
  q.fifo_len = 0;
  q.pipe = pipe;
  q.prod = q.cons = -1;
  if (!is_tbuf) {
    using AscendC::TPosition;
    switch (pos) {
      case TPosition::VECIN: q.prod = kPMte2, q.cons = kPV; break;
      case TPosition::VECOUT: q.prod = kPV, q.cons = kPMte3; break;
      case TPosition::A1:
      case TPosition::B1:
      case TPosition::C1: q.prod = kPMte2, q.cons = kPMte1; break;
      case TPosition::A2:
      case TPosition::B2: q.prod = kPMte1, q.cons = kPM; break;
      case TPosition::CO1: q.prod = kPM, q.cons = kPFix; break;
      default: break;
    }
  }
  for (auto& e : q.enq) e = Snap{};
  for (auto& e : q.fre) e = Snap{};
  q.initialized = true;
  c.top[mi] = static_cast<uint32_t>(end);
}

static void RequireInit(const char* api, const QueueState& q) {
  if (!q.initialized) Fault(api, "the queue has no buffers: call TPipe::InitBuffer first");
  if (Cur().pipe != q.pipe) Fault(api, "the TPipe that gave this queue its buffers is gone");
}

int32_t QueueAlloc(const char* api, QueueState& q) {
  RequireInit(api, q);
  for (int32_t i = 0; i < q.num; ++i) {
    if (q.state[i] == QueueState::kFree) {
      q.state[i] = QueueState::kAllocated;
      if (q.prod >= 0 && PipesOn()) Absorb(static_cast<PipeIdx>(q.prod), q.fre[i]);
      return i;
    }
  }
  Fault(api, Str("all ", q.num, " buffers of this ", QueName(q),
                 " are in use (allocated and not freed): on the NPU this call waits forever"));
}

void QueueEnque(const char* api, QueueState& q, const LocalRef& r) {
  RequireInit(api, q);
  const int32_t i = FindBuffer(q, r);
  if (i < 0) Fault(api, Str("the tensor was not allocated from this ", QueName(q)));
  if (q.state[i] == QueueState::kEnqueued || q.state[i] == QueueState::kFree) {
    Fault(api, Str("the tensor is ", StateName(q.state[i]), ", it cannot be enqueued"));
  }
  if (q.fifo_len >= q.depth) Fault(api, Str("the queue already holds depth = ", q.depth, " tensors"));
  q.fifo[q.fifo_len++] = i;
  q.state[i] = QueueState::kEnqueued;
  if (q.prod >= 0 && PipesOn()) q.enq[i] = SnapOf(static_cast<PipeIdx>(q.prod));
}

int32_t QueueDeque(const char* api, QueueState& q) {
  RequireInit(api, q);
  if (q.fifo_len == 0) {
    Fault(api, Str("DeQue of an empty ", QueName(q), " (nothing was EnQue'd): on the NPU this waits forever"));
  }
  const int32_t i = q.fifo[0];
  for (int32_t k = 1; k < q.fifo_len; ++k) q.fifo[k - 1] = q.fifo[k];
  --q.fifo_len;
  q.state[i] = QueueState::kDequeued;
  if (q.cons >= 0 && PipesOn()) Absorb(static_cast<PipeIdx>(q.cons), q.enq[i]);
  return i;
}

void QueueFree(const char* api, QueueState& q, const LocalRef& r) {
  RequireInit(api, q);
  const int32_t i = FindBuffer(q, r);
  if (i < 0) Fault(api, Str("FreeTensor of a tensor that was not allocated from this ", QueName(q)));
  if (q.state[i] == QueueState::kFree) Fault(api, "FreeTensor of a tensor that is not allocated (double free?)");
  if (q.state[i] == QueueState::kEnqueued) Fault(api, "FreeTensor of a tensor still in the queue (DeQue it first)");
  q.state[i] = QueueState::kFree;
  if (q.cons >= 0 && PipesOn()) q.fre[i] = SnapOf(static_cast<PipeIdx>(q.cons));
}

LocalRef QueueRef(const QueueState& q, int32_t idx, uint32_t elem_bytes) {
  LocalRef r;
  r.mem = q.mem;
  r.pos = q.pos;
  r.off = q.base[idx];
  r.size = q.len / elem_bytes;
  r.lo = q.base[idx];
  r.hi = q.base[idx] + q.len;
  return r;
}

LocalRef TBufRef(const char* api, const QueueState& q, uint32_t offset_bytes, uint64_t bytes, uint32_t elem_bytes) {
  RequireInit(api, q);
  if (offset_bytes % 32) Fault(api, Str("offset ", offset_bytes, " B is not 32-B aligned"));
  if (offset_bytes + bytes > q.len) {
    Fault(api, Str("asks for bytes [", offset_bytes, ", ", offset_bytes + bytes, ") of a ", q.len, "-byte ", QueName(q)));
  }
  LocalRef r;
  r.mem = q.mem;
  r.pos = q.pos;
  r.off = q.base[0] + offset_bytes;
  r.size = static_cast<uint32_t>(bytes / elem_bytes);
  r.lo = q.base[0];
  r.hi = q.base[0] + q.len;
  return r;
}

int32_t PipeAllocEvent(const char* api, void* pipe, AscendC::HardEvent evt) {
  auto* p = static_cast<AscendC::TPipe*>(pipe);
  uint8_t& ids = p->sim_event_ids[static_cast<int>(evt)];
  for (int32_t i = 0; i < 8; ++i) {
    if (!(ids & (1u << i))) {
      ids = static_cast<uint8_t>(ids | (1u << i));
      return i;
    }
  }
  Fault(api, "all 8 event ids of this HardEvent are allocated");
}

void PipeReleaseEvent(const char* api, void* pipe, AscendC::HardEvent evt, int32_t id) {
  auto* p = static_cast<AscendC::TPipe*>(pipe);
  uint8_t& ids = p->sim_event_ids[static_cast<int>(evt)];
  if (id < 0 || id > 7 || !(ids & (1u << id))) Fault(api, Str("event id ", id, " is not allocated"));
  ids = static_cast<uint8_t>(ids & ~(1u << id));
}

}  // namespace ascend_sim

AscendC::TPipe* GetTPipePtr() {
  ascend_sim::CoreContext& c = ascend_sim::Cur();
  if (c.pipe == nullptr) ascend_sim::Fault("GetTPipePtr", "no TPipe is live on this core");
  return static_cast<AscendC::TPipe*>(c.pipe);
}
