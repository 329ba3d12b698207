// hopperkit: TMA tensor maps via cudaGetDriverEntryPointByVersion.
#include "common/tensor_map.h"

#include <cuda_runtime.h>

#include <string>

#include "hopperkit/error.h"

namespace hopperkit {

namespace {
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_fn() {
  static EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}
}  // namespace

CUtensorMap make_tensor_map(const TensorMap4d& s, const char* arg) {
  EncodeTiledFn fn = encode_fn();
  HK_CHECK(kCuda, fn != nullptr, "cuTensorMapEncodeTiled", "the driver entry point (CUDA 12+ driver)",
           "not found");
  CUtensorMap map;
  const cuuint64_t dims[4] = {s.dims[0], s.dims[1], s.dims[2], s.dims[3]};
  const cuuint64_t strides[3] = {s.strides_bytes[0], s.strides_bytes[1], s.strides_bytes[2]};
  const cuuint32_t box[4] = {s.box[0], s.box[1], s.box[2], s.box[3]};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  CUresult r = fn(&map, s.dtype, 4, const_cast<void*>(s.base), dims, strides, box, elem_strides,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, s.swizzle, s.promotion,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HK_CHECK(kCuda, r == CUDA_SUCCESS, arg, "a TMA descriptor accepted by cuTensorMapEncodeTiled",
           "CUresult " + std::to_string(static_cast<int>(r)));
  return map;
}

}  // namespace hopperkit
