// CPU tests of the exact fast division used by kernels (include/hopperkit/fast_div.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "hopperkit/fast_div.h"

using hopperkit::fast_div;
using hopperkit::make_fast_div;

TEST(FastDiv, SmallDivisorsAllNumeratorsNearPowersAndMultiples) {
  for (uint32_t d = 1; d <= 600; ++d) {
    const auto f = make_fast_div(d);
    for (uint32_t n = 0; n < 5000; ++n) ASSERT_EQ(fast_div(n, f), n / d) << n << " / " << d;
    for (uint32_t k : {1u << 20, 1u << 27, (1u << 31) / d}) {  // around multiples of d, up to the top of the range
      for (int64_t dn = -2; dn <= 2; ++dn) {
        const int64_t n = static_cast<int64_t>(k) * d + dn;
        if (n < 0 || n >= (int64_t{1} << 31)) continue;
        ASSERT_EQ(fast_div(static_cast<uint32_t>(n), f), static_cast<uint32_t>(n) / d) << n << " / " << d;
      }
    }
    ASSERT_EQ(fast_div(0x7fffffffu, f), 0x7fffffffu / d);
  }
}

TEST(FastDiv, RandomDivisorsAndNumerators) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t d = 1 + rng() % 0x7ffffffeu;
    const uint32_t n = rng() & 0x7fffffffu;
    const auto f = make_fast_div(d);
    ASSERT_EQ(fast_div(n, f), n / d) << n << " / " << d;
  }
  for (uint32_t d : {2u, 3u, 7u, 10u, 81u, 96u, 1u << 30, 0x7ffffffeu}) {
    const auto f = make_fast_div(d);
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 0x7ffffffeu, 0x7fffffffu}) ASSERT_EQ(fast_div(n, f), n / d);
  }
}
