// hopperkit: exact division of non-negative 32-bit integers by a runtime divisor fixed per launch, with one
// 64-bit multiply and a shift (the round-up method: for 1 <= d < 2^31, l = ceil(log2 d) and
// m = floor(2^(32 + l) / d) + 1 <= 2^33, floor(n * m / 2^(32 + l)) == n / d for every 0 <= n < 2^32; with
// n < 2^31 the product fits 64 bits). Set up on the host, used in kernels; CPU-tested against division.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HK_FD_HD __host__ __device__ __forceinline__
#else
#define HK_FD_HD inline
#endif

namespace hopperkit {

struct FastDiv {
  uint64_t mul = 1;  // m (up to 33 bits)
  uint32_t shift = 32;
  uint32_t d = 1;
};

// d in [1, 2^31)
inline FastDiv make_fast_div(uint32_t d) {
  FastDiv f;
  f.d = d;
  uint32_t l = 0;
  while ((uint64_t{1} << l) < d) ++l;  // ceil(log2 d)
  f.shift = 32 + l;
  f.mul = ((uint64_t{1} << f.shift) / d) + 1;
  return f;
}

// n in [0, 2^31)
HK_FD_HD uint32_t fast_div(uint32_t n, const FastDiv& f) {
  return static_cast<uint32_t>((static_cast<uint64_t>(n) * f.mul) >> f.shift);
}

}  // namespace hopperkit
