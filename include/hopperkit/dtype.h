// hopperkit: element types that cross the API, and a framework-free tensor descriptor used by bindings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hopperkit {

enum class DType : int32_t {
  kBF16 = 0,
  kF16 = 1,
  kF32 = 2,
  kFP8E4M3 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUInt8 = 6,
};

const char* dtype_name(DType t);
int dtype_size(DType t);

// A view of one tensor as a binding sees it (DLPack-like). Strides are in elements.
struct TensorDesc {
  const void* data = nullptr;
  DType dtype = DType::kUInt8;
  int device_type = 0;  // 2 = CUDA (DLPack's kDLCUDA); anything else is rejected for device buffers
  int device_id = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int ndim() const { return static_cast<int>(shape.size()); }
};

std::string shape_str(const std::vector<int64_t>& v);

namespace check {
// Each throws hopperkit::Error naming `arg` with the expected and the actual value.
void cuda_device(const TensorDesc& t, const char* arg, int device_id);
void rank(const TensorDesc& t, const char* arg, int ndim, const char* expected_layout);
void extent(const TensorDesc& t, const char* arg, int dim, int64_t expected, const char* expected_layout);
void dtype(const TensorDesc& t, const char* arg, DType expected);
void dtype_one_of(const TensorDesc& t, const char* arg, DType a, DType b);
void last_dim_contiguous(const TensorDesc& t, const char* arg);
void contiguous(const TensorDesc& t, const char* arg);
// Every stride (in bytes) and the base pointer are multiples of `bytes`.
void aligned(const TensorDesc& t, const char* arg, int bytes);
}  // namespace check

}  // namespace hopperkit
