// Host side of the Ascend grouped GEMM: workspace size and plan check, from the same
// gg_layout.h the kernel reads.
#include "ascend/grouped_gemm/grouped_gemm.h"

#include <cstring>
#include <stdexcept>

#include "ascend/grouped_gemm/gg_layout.h"

namespace dualops {

namespace {

GroupedGemmTiling TilingFrom(const std::string& s) {
  if (s.size() < sizeof(GroupedGemmTiling)) {
    throw std::invalid_argument("tiling must hold at least the " + std::to_string(GroupedGemmTiling::kInts) +
                                " int32 grouped-GEMM plan header fields, got " + std::to_string(s.size()) + " bytes");
  }
  GroupedGemmTiling t;
  std::memcpy(&t, s.data(), sizeof(t));
  return t;
}

}  // namespace

uint64_t AscendGroupedGemmWorkspaceBytes(const std::string& tiling) {
  return gg::MakeWorkspace(TilingFrom(tiling)).total;
}

std::string AscendGroupedGemmCheckTiling(const std::string& tiling, int64_t l1_bytes, int64_t l0a_bytes,
                                         int64_t l0b_bytes, int64_t l0c_bytes) {
  const GroupedGemmTiling t = TilingFrom(tiling);
  const char* why = gg::CheckTiling(t, l1_bytes, l0a_bytes, l0b_bytes, l0c_bytes);
  if (why != nullptr) return why;
  const int64_t want = static_cast<int64_t>(sizeof(GroupedGemmTiling)) + static_cast<int64_t>(t.num_items) * 12;
  if (static_cast<int64_t>(tiling.size()) < want) return "tiling holds fewer items than num_items";
  return std::string();
}

}  // namespace dualops
