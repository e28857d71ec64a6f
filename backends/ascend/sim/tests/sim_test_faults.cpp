// Self-test kernel with planted bugs: the tiling buffer picks one fault class, and
// tests/test_ascend_sim.py checks that the simulator reports it naming the kernel, the core
// and the call. Case 0 runs clean.
//
// buf: float [256] (a small GM buffer); tiling (int32): [case]
#include "kernel_operator.h"

using namespace AscendC;

namespace {

enum FaultCase : int32_t {
  kNone = 0,
  kUbOverAllocation = 1,     // AIV: InitBuffer beyond the 192 KB UB
  kMisalignedOperand = 2,    // AIV: Add on a tensor starting 12 B into a buffer
  kGmOutOfBounds = 3,        // AIV: DataCopy reads past the end of buf
  kUnmatchedWait = 4,        // AIV: CrossCoreWaitFlag nobody ever sets
  kDequeEmpty = 5,           // AIV: DeQue with nothing enqueued
  kCubeOnVector = 6,         // AIV: Mmad
  kVectorOnCube = 7,         // AIC: Add on an L1 tensor
  kL1QueueOnVector = 8,      // AIV: InitBuffer of an A1 (L1) queue
  kDoubleFree = 9,           // AIV: FreeTensor twice
  kUnalignedLength = 10,     // AIV: DataCopy of 7 floats (28 B)
  kL0aOverAllocation = 11,   // AIC: 80 KB in L0A
  kTimeout = 12,             // AIV waits while the AIC is busy past the timeout
  kUnmatchedSet = 13,        // AIC sets a flag nobody waits for
  kLoadDataMisaligned = 14,  // AIC: LoadData into L0A at a 256-B offset
  kBf16Arithmetic = 15,      // AIV: Add on bfloat16_t
  kSyncAllMissing = 16,      // AIV1 of AI core 0 skips SyncAll
  kWaitFlagUnset = 17,       // AIV: WaitFlag<MTE2_V> without SetFlag
  kTwoPipes = 18,            // AIV: a second TPipe while one is live
  kBadFlagId = 19,           // AIC: CrossCoreSetFlag(11)
  kQueueExhausted = 20,      // AIV: AllocTensor twice from a 1-buffer queue
  kGmWriteOutOfBounds = 21,  // AIV: DataCopy writes past the end of buf
  // Missing pipe synchronisation, one class each (asynchronous pipes, pipes.h):
  kMissMte2Mte1 = 22,        // AIC: LoadData reads L1 that DataCopy (MTE2) may still be writing
  kMissMte1Mte2 = 23,        // AIC: DataCopy (MTE2) overwrites L1 that LoadData (MTE1) may still be reading
  kMissVMte3 = 24,           // AIV: DataCopy UB -> GM (MTE3) of what Duplicate (V) may still be writing
  kMissMte3Mte2 = 25,        // AIV: DataCopy GM -> UB (MTE2) into UB that MTE3 may still be reading
  kMissVBarrier = 26,        // AIV: Muls reads what Adds wrote, no PipeBarrier<PIPE_V>
  kMissFixVCross = 27,       // AIC Fixpipe -> GM, flag set on PIPE_MTE2 (not FIX); AIV reads it
  kFixVCrossOk = 28,         // the same with the flag on PIPE_FIX: clean
  kMissSV = 29,              // AIV: Adds reads what SetValue (S) wrote, no S_V
  kRoundTripOk = 30,         // AIV MTE3 reads UB, flag on MTE3 to the AIC and back: V may rewrite it
};

__aicore__ inline void VectorCase(int32_t c, GlobalTensor<float>& g) {
  TPipe pipe;
  GlobalTensor<float> raw;   // no declared size: only the launcher's buffer list bounds it
  raw.SetGlobalBuffer(g.GetPhyAddr(0));
  TQue<TPosition::VECIN, 1> q;
  TBuf<TPosition::VECCALC> tb;
  switch (c) {
    case kUbOverAllocation:
      pipe.InitBuffer(q, 2, 100 * 1024);   // 200 KB > 192 KB
      break;
    case kMisalignedOperand: {
      pipe.InitBuffer(tb, 1024);
      LocalTensor<float> t = tb.Get<float>();
      Duplicate(t, 1.0f, 64);
      Add(t[3], t[3], t[3], 16);
      break;
    }
    case kGmOutOfBounds: {
      pipe.InitBuffer(q, 1, 2048);
      LocalTensor<float> t = q.AllocTensor<float>();
      DataCopy(t, raw[128], 256);   // elements [128, 384) of a 256-element buffer
      break;
    }
    case kUnmatchedWait:
      if (GetBlockIdx() == 0) CrossCoreWaitFlag(5);
      break;
    case kDequeEmpty: {
      pipe.InitBuffer(q, 1, 1024);
      LocalTensor<float> t = q.DeQue<float>();
      (void)t;
      break;
    }
    case kCubeOnVector: {
      pipe.InitBuffer(tb, 1024);
      LocalTensor<float> t = tb.Get<float>();
      LocalTensor<half> h = t.ReinterpretCast<half>();
      Mmad(t, h, h, MmadParams(16, 16, 16, 0, false, true));
      break;
    }
    case kL1QueueOnVector: {
      TQue<TPosition::A1, 1> l1q;
      pipe.InitBuffer(l1q, 1, 1024);
      break;
    }
    case kDoubleFree: {
      pipe.InitBuffer(q, 1, 1024);
      LocalTensor<float> t = q.AllocTensor<float>();
      q.FreeTensor(t);
      q.FreeTensor(t);
      break;
    }
    case kUnalignedLength: {
      pipe.InitBuffer(q, 1, 1024);
      LocalTensor<float> t = q.AllocTensor<float>();
      DataCopy(t, g, 7);
      break;
    }
    case kTimeout:
      CrossCoreWaitFlag(3);
      break;
    case kBf16Arithmetic: {
      pipe.InitBuffer(tb, 1024);
      LocalTensor<bfloat16_t> t = tb.Get<bfloat16_t>();
      Add(t, t, t, 16);
      break;
    }
    case kSyncAllMissing:
      if (GetBlockIdx() != 1) SyncAll();
      break;
    case kWaitFlagUnset:
      WaitFlag<HardEvent::MTE2_V>(0);
      break;
    case kTwoPipes: {
      TPipe second;
      break;
    }
    case kQueueExhausted: {
      pipe.InitBuffer(q, 1, 1024);
      LocalTensor<float> a = q.AllocTensor<float>();
      LocalTensor<float> b = q.AllocTensor<float>();
      (void)a, (void)b;
      break;
    }
    case kGmWriteOutOfBounds: {
      pipe.InitBuffer(q, 1, 2048);
      LocalTensor<float> t = q.AllocTensor<float>();
      Duplicate(t, 0.0f, 512);
      SetFlag<HardEvent::V_MTE3>(0);
      WaitFlag<HardEvent::V_MTE3>(0);
      DataCopy(raw[64], t, 256);   // writes elements [64, 320)
      break;
    }
    case kMissVMte3: {
      pipe.InitBuffer(tb, 1024);
      LocalTensor<float> t = tb.Get<float>();
      Duplicate(t, 0.0f, 64);
      DataCopy(g, t, 64);
      break;
    }
    case kMissMte3Mte2: {
      pipe.InitBuffer(tb, 1024);
      LocalTensor<float> t = tb.Get<float>();
      Duplicate(t, 0.0f, 64);
      SetFlag<HardEvent::V_MTE3>(0);
      WaitFlag<HardEvent::V_MTE3>(0);
      SetFlag<HardEvent::V_MTE2>(0);
      WaitFlag<HardEvent::V_MTE2>(0);
      DataCopy(g[64 * GetBlockIdx()], t, 64);
      DataCopy(t, g[64 * GetBlockIdx()], 64);
      break;
    }
    case kMissVBarrier: {
      pipe.InitBuffer(tb, 1024);
      LocalTensor<float> t = tb.Get<float>();
      Duplicate(t, 1.0f, 64);
      PipeBarrier<PIPE_V>();
      Adds(t[64], t, 1.0f, 64);
      Muls(t[128], t[64], 2.0f, 64);
      break;
    }
    case kMissFixVCross:
    case kFixVCrossOk: {
      pipe.InitBuffer(tb, 1024);
      LocalTensor<float> t = tb.Get<float>();
      CrossCoreWaitFlag(6);
      DataCopy(t, g[128 * (GetBlockIdx() / 2)], 64);
      break;
    }
    case kRoundTripOk: {
      pipe.InitBuffer(tb, 1024);
      LocalTensor<float> t = tb.Get<float>();
      Duplicate(t, 1.0f, 64);
      SetFlag<HardEvent::V_MTE3>(0);
      WaitFlag<HardEvent::V_MTE3>(0);
      DataCopy(g[64 * GetBlockIdx()], t, 64);
      CrossCoreSetFlag<2, PIPE_MTE3>(7);
      CrossCoreWaitFlag(8);
      Duplicate(t, 2.0f, 64);   // the round trip proves the MTE3 read done
      break;
    }
    case kMissSV: {
      pipe.InitBuffer(tb, 1024);
      LocalTensor<float> t = tb.Get<float>();
      t.SetValue(0, 1.0f);
      Adds(t[64], t, 1.0f, 64);
      break;
    }
    default:
      break;
  }
}

__aicore__ inline void CubeCase(int32_t c, GlobalTensor<float>& g) {
  TPipe pipe;
  switch (c) {
    case kVectorOnCube: {
      TBuf<TPosition::A1> l1;
      pipe.InitBuffer(l1, 1024);
      LocalTensor<float> t = l1.Get<float>();
      Add(t, t, t, 64);
      break;
    }
    case kL0aOverAllocation: {
      TBuf<TPosition::A2> l0a;
      pipe.InitBuffer(l0a, 80 * 1024);
      break;
    }
    case kTimeout: {
      // Stay busy (scalar GM reads) far past the short timeout the test sets; the vector
      // cores' waits time out first and the launch stops this loop.
      float acc = 0;
      for (int64_t i = 0; i < 4000000000LL; ++i) acc += g.GetValue(i % 256);
      if (acc == 12345.0f) g.SetValue(0, acc);
      CrossCoreSetFlag<2, PIPE_FIX>(3);
      break;
    }
    case kUnmatchedSet:
      CrossCoreSetFlag<2, PIPE_FIX>(4);
      break;
    case kLoadDataMisaligned: {
      TBuf<TPosition::A1> l1;
      TBuf<TPosition::A2> l0a;
      pipe.InitBuffer(l1, 2048);
      pipe.InitBuffer(l0a, 2048);
      LocalTensor<half> s = l1.Get<half>();
      LocalTensor<half> d = l0a.Get<half>();
      LoadData(d[128], s, LoadData2DParams(0, 1, 1, 0, 0, false, 0));
      break;
    }
    case kBadFlagId:
      CrossCoreSetFlag<2, PIPE_FIX>(11);
      break;
    case kMissMte2Mte1:
    case kMissMte1Mte2: {
      TBuf<TPosition::A1> l1;
      TBuf<TPosition::A2> l0a;
      pipe.InitBuffer(l1, 2048);
      pipe.InitBuffer(l0a, 2048);
      LocalTensor<half> s = l1.Get<half>();
      LocalTensor<half> d = l0a.Get<half>();
      GlobalTensor<half> gh;
      gh.SetGlobalBuffer(reinterpret_cast<__gm__ half*>(g.GetPhyAddr(0)), 512);
      DataCopy(s, gh, 256);
      if (c == kMissMte1Mte2) {
        SetFlag<HardEvent::MTE2_MTE1>(0);
        WaitFlag<HardEvent::MTE2_MTE1>(0);
      }
      LoadData(d, s, LoadData2DParams(0, 1, 1, 0, 0, false, 0));
      if (c == kMissMte1Mte2) DataCopy(s, gh[256], 256);
      break;
    }
    case kRoundTripOk:
      CrossCoreWaitFlag(7);
      CrossCoreSetFlag<2, PIPE_FIX>(8);
      break;
    case kMissFixVCross:
    case kFixVCrossOk: {
      TBuf<TPosition::CO1> l0c;
      pipe.InitBuffer(l0c, 1024);
      Fixpipe<float, float, CFG_ROW_MAJOR>(g[128 * GetBlockIdx()], l0c.Get<float>(), FixpipeParamsV220(16, 8, 16, 16, false));
      if (c == kMissFixVCross) CrossCoreSetFlag<2, PIPE_MTE2>(6);
      else CrossCoreSetFlag<2, PIPE_FIX>(6);
      break;
    }
    default:
      break;
  }
}

}  // namespace

extern "C" __global__ __aicore__ void sim_test_faults(GM_ADDR buf, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
  GlobalTensor<int32_t> t;
  t.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(tiling), 1);
  const int32_t c = t.GetValue(0);
  GlobalTensor<float> g;
  g.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(buf), 256);
  if ASCEND_IS_AIV {
    VectorCase(c, g);
  } else {
    CubeCase(c, g);
  }
}

#if defined(DUALOPS_ASCEND_SIM)
ASCEND_SIM_REGISTER_KERNEL(sim_test_faults, KERNEL_TYPE_MIX_AIC_1_2);
#endif
