// Host side of the Ascend C MLA decode kernel: workspace size and tiling check, from the same
// mla_layout.h the kernel reads.
#include "ascend/mla_decode/mla_decode.h"

#include <cstring>

#include "ascend/mla_decode/mla_layout.h"

namespace dualops {
namespace mla {

namespace {

bool Headers(const void* tiling, size_t n, MlaDecodeAscendLaunch& h, MlaDecodeTiling& t) {
  if (n < sizeof(MlaDecodeAscendLaunch) + sizeof(MlaDecodeTiling) || n % 4) return false;
  std::memcpy(&h, tiling, sizeof(h));
  std::memcpy(&t, static_cast<const uint8_t*>(tiling) + sizeof(h), sizeof(t));
  return true;
}

}  // namespace

uint64_t AscendWorkspaceBytes(const void* tiling, size_t n) {
  MlaDecodeAscendLaunch h;
  MlaDecodeTiling t;
  if (!Headers(tiling, n, h, t)) return 0;
  return WorkspaceBytes(h);
}

const char* AscendCheckTiling(const void* tiling, size_t n) {
  MlaDecodeAscendLaunch h;
  MlaDecodeTiling t;
  if (!Headers(tiling, n, h, t)) return "tiling must hold the launch header and the MLA plan header (int32s)";
  return CheckTiling(h, t, static_cast<int64_t>(n / 4));
}

}  // namespace mla
}  // namespace dualops
