// hopperkit: building TMA tensor maps through the driver entry point (no link-time dependency on libcuda, so
// the library loads on machines without a driver).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace hopperkit {

// A 4-d tiled tensor map. dims/strides innermost first; strides in bytes for dims 1..3.
struct TensorMap4d {
  CUtensorMapDataType dtype;
  const void* base;
  uint64_t dims[4];
  uint64_t strides_bytes[3];
  uint32_t box[4];
  CUtensorMapSwizzle swizzle;
  CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
};

// Throws hopperkit::Error (kind kCuda) if the driver rejects the map.
CUtensorMap make_tensor_map(const TensorMap4d& spec, const char* arg);

}  // namespace hopperkit
