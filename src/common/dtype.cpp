// hopperkit: dtypes and the tensor checks that bindings run before building a params struct.
#include "hopperkit/dtype.h"

#include "hopperkit/error.h"

namespace hopperkit {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    case DType::kF32: return "float32";
    case DType::kFP8E4M3: return "float8_e4m3fn";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
  }
  return "unknown";
}

int dtype_size(DType t) {
  switch (t) {
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kF32:
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kFP8E4M3:
    case DType::kUInt8: return 1;
  }
  return 0;
}

std::string shape_str(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

namespace check {

void cuda_device(const TensorDesc& t, const char* arg, int device_id) {
  constexpr int kDLCUDA = 2;
  std::string actual = t.device_type == kDLCUDA ? "cuda:" + std::to_string(t.device_id)
                       : t.device_type == 1     ? std::string("cpu")
                                                : "device type " + std::to_string(t.device_type);
  HK_CHECK(kDevice, t.device_type == kDLCUDA && t.device_id == device_id, arg,
           "a tensor on cuda:" + std::to_string(device_id), actual);
}

void rank(const TensorDesc& t, const char* arg, int ndim, const char* expected_layout) {
  HK_CHECK(kShape, t.ndim() == ndim, arg, std::string(expected_layout),
           std::to_string(t.ndim()) + "-d shape " + shape_str(t.shape));
}

void extent(const TensorDesc& t, const char* arg, int dim, int64_t expected, const char* expected_layout) {
  HK_CHECK(kShape, dim < t.ndim() && t.shape[dim] == expected, arg,
           std::string(expected_layout) + " with size " + std::to_string(expected) + " at dim " +
               std::to_string(dim),
           "shape " + shape_str(t.shape));
}

void dtype(const TensorDesc& t, const char* arg, DType expected) {
  HK_CHECK(kDtype, t.dtype == expected, arg, dtype_name(expected), dtype_name(t.dtype));
}

void dtype_one_of(const TensorDesc& t, const char* arg, DType a, DType b) {
  HK_CHECK(kDtype, t.dtype == a || t.dtype == b, arg, std::string(dtype_name(a)) + " or " + dtype_name(b),
           dtype_name(t.dtype));
}

void last_dim_contiguous(const TensorDesc& t, const char* arg) {
  HK_CHECK(kStride, t.ndim() == 0 || t.strides.back() == 1 || t.shape.back() == 1, arg,
           "last dimension contiguous (stride 1)", "strides " + shape_str(t.strides));
}

void contiguous(const TensorDesc& t, const char* arg) {
  int64_t expect = 1;
  bool ok = true;
  for (int d = t.ndim() - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expect) ok = false;
    expect *= t.shape[d];
  }
  HK_CHECK(kStride, ok, arg, "a contiguous tensor", "shape " + shape_str(t.shape) + " strides " + shape_str(t.strides));
}

void aligned(const TensorDesc& t, const char* arg, int bytes) {
  uintptr_t p = reinterpret_cast<uintptr_t>(t.data);
  HK_CHECK(kAlignment, p % bytes == 0, arg, "data pointer aligned to " + std::to_string(bytes) + " bytes",
           "address " + std::to_string(p) + " (offset " + std::to_string(p % bytes) + ")");
  int es = dtype_size(t.dtype);
  for (int d = 0; d < t.ndim(); ++d) {
    if (t.shape[d] == 1 || d == t.ndim() - 1) continue;
    HK_CHECK(kAlignment, (t.strides[d] * es) % bytes == 0, arg,
             "strides that are multiples of " + std::to_string(bytes) + " bytes",
             "stride " + std::to_string(t.strides[d]) + " elements at dim " + std::to_string(d));
  }
}

}  // namespace check
}  // namespace hopperkit
