#pragma once
// A named NVTX range for the profiler timeline: `wb::NvtxRange r("attention");`
#include <nvtx3/nvToolsExt.h>

namespace wb {
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};
}  // namespace wb
