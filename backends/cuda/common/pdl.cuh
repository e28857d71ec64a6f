// Programmatic dependent launch (PDL), device side. A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization is scheduled while the kernel ahead of it in
// the stream finishes; it may compute addresses and prefetch into L2, but must call pdl_wait()
// before it reads anything the kernel ahead writes. pdl_launch_dependents() lets the next kernel
// be scheduled now. Both are no-ops for a kernel launched the ordinary way.
#pragma once

namespace dualops::cuda::common {

__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

}  // namespace dualops::cuda::common
