// hopperkit: Hopper warpgroup MMA (wgmma) with fp32 accumulators: FP8 e4m3 with both operands in shared memory, and
// (at the end) bf16 / f16, and e4m3, with A from registers.
//
// Both operands are K-major tiles of 128-byte rows with the 128-byte swizzle (what TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B from a 1 KB aligned base, and what swz() in the MoE GEMM reproduces for cp.async).
// A wgmma of shape m64nNk32 reads 32 bytes of K: the descriptor's start address moves by 32 bytes per k step
// inside the 128-byte swizzle atom. The accumulator layout per warp w of the warpgroup equals that of N/8
// mma.sync m16n8 tiles for rows 16w..16w+15: d[i][0..1] = row g, columns 8i + 2 t4 (+1); d[i][2..3] = row g + 8.
#pragma once

#include <cstdint>

namespace hopperkit {
namespace ptx {

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row core-matrix groups 1024 bytes apart.
__device__ __forceinline__ uint64_t gmma_desc_sw128(uint32_t smem_byte_addr) {
  uint64_t d = static_cast<uint64_t>((smem_byte_addr & 0x3FFFFu) >> 4);  // bits 0-13: start address / 16
  d |= static_cast<uint64_t>(1) << 16;                                   // bits 16-29: leading offset (unused)
  d |= static_cast<uint64_t>(1024 >> 4) << 32;                           // bits 32-45: stride offset / 16
  d |= static_cast<uint64_t>(1) << 62;                                   // bits 62-63: 1 = 128-byte swizzle
  return d;
}

// The descriptor of the address `byte_offset` bytes past the one `desc` describes: the start address field is
// (address & 0x3FFFF) >> 4 in bits 0-13, so for offsets that are multiples of 16 and stay inside shared memory
// (below 2^18 bytes: no carry out of the field) the field just grows by byte_offset / 16. Lets a stage's
// descriptors come from two built ones by adds (each built one is a shift, masks and ORs).
__device__ __forceinline__ uint64_t gmma_desc_add(uint64_t desc, uint32_t byte_offset) {
  // 32-bit add on the low word (no carry can leave the field): no 64-bit add with carry per descriptor
  const uint32_t lo = static_cast<uint32_t>(desc) + (byte_offset >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

// wgmma reads shared memory through the async proxy: operands written by the generic proxy (st.shared, cp.async)
// need this fence, by the reading thread after it has observed the writes (e.g. after its mbarrier wait).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Pins a register that an in-flight wgmma writes: reads of it are not moved above the wgmma_wait before this.
__device__ __forceinline__ void wgmma_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Accumulator operand lists of a wgmma over d[NT0 .. NT0 + N/8): C is the constraint, "+f" (d is read and
// written) or "=f" (d is only written: no false dependence on its previous values).
#define HK_WGMMA_ACC4(C, nt) C(d[NT0 + nt][0]), C(d[NT0 + nt][1]), C(d[NT0 + nt][2]), C(d[NT0 + nt][3])
#define HK_WGMMA_ACC32(C) HK_WGMMA_ACC4(C, 0), HK_WGMMA_ACC4(C, 1), HK_WGMMA_ACC4(C, 2), HK_WGMMA_ACC4(C, 3)
#define HK_WGMMA_ACC48(C) HK_WGMMA_ACC32(C), HK_WGMMA_ACC4(C, 4), HK_WGMMA_ACC4(C, 5)
#define HK_WGMMA_ACC64(C) HK_WGMMA_ACC32(C), HK_WGMMA_ACC4(C, 4), HK_WGMMA_ACC4(C, 5), HK_WGMMA_ACC4(C, 6), \
                          HK_WGMMA_ACC4(C, 7)
#define HK_WGMMA_ACC96(C) HK_WGMMA_ACC64(C), HK_WGMMA_ACC4(C, 8), HK_WGMMA_ACC4(C, 9), HK_WGMMA_ACC4(C, 10), \
                          HK_WGMMA_ACC4(C, 11)
#define HK_WGMMA_RW(x) "+f"(x)
#define HK_WGMMA_W(x) "=f"(x)
#define HK_WGMMA_ACC8(C) HK_WGMMA_ACC4(C, 0), HK_WGMMA_ACC4(C, 1)
#define HK_WGMMA_REGS8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define HK_WGMMA_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define HK_WGMMA_REGS48 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}"
#define HK_WGMMA_REGS64                                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"

#define HK_WGMMA_REGS96                                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, " \
  "%44, %45, %46, %47}"

// One m64nNk32 e4m3 wgmma: accumulator constraint C ("+f" or "=f") and scale-d (1: d += A x B^T, 0: d = A x B^T).
// HK_WGMMA_E4M3_N: the instruction for one N (its text, register list, descriptor operands and accumulators).
#define HK_WGMMA_E4M3_N(NN, REGS, DESCS, ACC, C, SCALE_D)                                                       \
  if constexpr (N == NN) {                                                                                       \
    asm volatile("wgmma.mma_async.sync.aligned.m64n" #NN "k32.f32.e4m3.e4m3 " REGS ", " DESCS ", " SCALE_D       \
                 ", 1, 1;\n"                                                                                     \
                 : ACC(C)                                                                                        \
                 : "l"(desc_a), "l"(desc_b));                                                                    \
  }
#define HK_WGMMA_E4M3(C, SCALE_D)                                                          \
  HK_WGMMA_E4M3_N(16, HK_WGMMA_REGS8, "%8, %9", HK_WGMMA_ACC8, C, SCALE_D)                 \
  HK_WGMMA_E4M3_N(32, HK_WGMMA_REGS32, "%16, %17", HK_WGMMA_ACC32, C, SCALE_D)             \
  HK_WGMMA_E4M3_N(48, HK_WGMMA_REGS48, "%24, %25", HK_WGMMA_ACC48, C, SCALE_D)             \
  HK_WGMMA_E4M3_N(64, HK_WGMMA_REGS64, "%32, %33", HK_WGMMA_ACC64, C, SCALE_D)             \
  HK_WGMMA_E4M3_N(96, HK_WGMMA_REGS96, "%48, %49", HK_WGMMA_ACC96, C, SCALE_D)

// d[NT0 .. NT0 + N/8) += A (64 x 32 bytes at desc_a) x B (N rows x 32 bytes at desc_b)^T, e4m3 in, fp32 out
// (a chain's first product: wgmma_m64k32_e4m3_first below).
template <int N, int NT0, int NT>
__device__ __forceinline__ void wgmma_m64k32_e4m3(float (&d)[NT][4], uint64_t desc_a, uint64_t desc_b) {
  static_assert(N == 16 || N == 32 || N == 48 || N == 64 || N == 96, "wgmma N: 16, 32, 48, 64 or 96");
  static_assert(NT0 + N / 8 <= NT, "accumulator slice");
  HK_WGMMA_E4M3(HK_WGMMA_RW, "1")
}

// d[NT0 .. NT0 + N/8) = A x B^T (the previous values are not read), d declared write-only: a chain that starts with it
// does not depend on d's earlier values, so ptxas can keep such chains in flight across loop iterations.
template <int N, int NT0, int NT>
__device__ __forceinline__ void wgmma_m64k32_e4m3_first(float (&d)[NT][4], uint64_t desc_a, uint64_t desc_b) {
  static_assert(N == 16 || N == 32 || N == 48 || N == 64 || N == 96, "wgmma N: 16, 32, 48, 64 or 96");
  static_assert(NT0 + N / 8 <= NT, "accumulator slice");
  HK_WGMMA_E4M3(HK_WGMMA_W, "0")
}

// d[NT0 .. NT0 + N/8) = A x B^T like wgmma_m64k32_e4m3_first, but d read-write in the constraints: the product
// lands in the registers d already holds. For a partial buffer reused in turn within an unrolled loop (the
// block-wise 128-row gate-up's quarter stages): with a write-only d, ptxas gives each reuse registers of its own
// (4 partials live instead of 2, and spills).
template <int N, int NT0, int NT>
__device__ __forceinline__ void wgmma_m64k32_e4m3_first_inplace(float (&d)[NT][4], uint64_t desc_a, uint64_t desc_b) {
  static_assert(N == 16 || N == 32 || N == 48 || N == 64 || N == 96, "wgmma N: 16, 32, 48, 64 or 96");
  static_assert(NT0 + N / 8 <= NT, "accumulator slice");
  HK_WGMMA_E4M3(HK_WGMMA_RW, "0")
}

// ---- A from registers: 16-bit operands (bf16 or f16), then e4m3 -------------------------------------------------
// A (64 x 16) comes from registers: each warp w of the warpgroup passes its rows 16w..16w+15 as an mma.sync
// m16n8k16 A fragment (a0: row g, k 2 t4 (+1); a1: row g + 8; a2 / a3: k + 8). B from a shared-memory
// descriptor: N x 16 K-major for wgmma_m64n64k16_rs (gmma_desc_sw128), 16 x N N-major for wgmma_m64n128k16_rs_tn
// (gmma_desc_sw128_mn; `.tnspB`). kFirst: d = A x B (d's previous values not read), else d += A x B.

// Shared-memory matrix descriptor: MN-major, 128-byte swizzle. A swizzle atom is 64 16-bit elements along MN
// (128 contiguous bytes) x 8 rows along K (128 bytes apart); `atom_mn_bytes` is the distance between atoms along
// MN (leading offset), `k8_bytes` the distance between groups of 8 K rows (stride offset).
__device__ __forceinline__ uint64_t gmma_desc_sw128_mn(uint32_t smem_byte_addr, uint32_t atom_mn_bytes,
                                                       uint32_t k8_bytes) {
  uint64_t d = static_cast<uint64_t>((smem_byte_addr & 0x3FFFFu) >> 4);
  d |= static_cast<uint64_t>((atom_mn_bytes >> 4) & 0x3FFFu) << 16;
  d |= static_cast<uint64_t>((k8_bytes >> 4) & 0x3FFFu) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}

#define HK_WG16_ACC4(C, i) C(d[i][0]), C(d[i][1]), C(d[i][2]), C(d[i][3])
#define HK_WG16_ACC32(C)                                                                                    \
  HK_WG16_ACC4(C, 0), HK_WG16_ACC4(C, 1), HK_WG16_ACC4(C, 2), HK_WG16_ACC4(C, 3), HK_WG16_ACC4(C, 4), \
      HK_WG16_ACC4(C, 5), HK_WG16_ACC4(C, 6), HK_WG16_ACC4(C, 7)
#define HK_WG16_ACC64(C)                                                                                       \
  HK_WG16_ACC32(C), HK_WG16_ACC4(C, 8), HK_WG16_ACC4(C, 9), HK_WG16_ACC4(C, 10), HK_WG16_ACC4(C, 11),      \
      HK_WG16_ACC4(C, 12), HK_WG16_ACC4(C, 13), HK_WG16_ACC4(C, 14), HK_WG16_ACC4(C, 15)
#define HK_WG16_RW(x) "+f"(x)
#define HK_WG16_W(x) "=f"(x)
#define HK_WG16_REGS64                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define HK_WG16_REGS32                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define HK_WG16(NN, TY, REGS, AOPS, ACC, C, SCALE_D, TNSP)                                                         \
  asm volatile("wgmma.mma_async.sync.aligned.m64n" #NN "k16.f32." TY "." TY " " REGS ", " AOPS ", " SCALE_D       \
               ", 1, 1, " TNSP ";\n"                                                                               \
               : ACC(C)                                                                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
#define HK_WG16_N64(TY, C, SD, TN) \
  HK_WG16(64, TY, HK_WG16_REGS32, "{%32, %33, %34, %35}, %36", HK_WG16_ACC32, C, SD, TN)
#define HK_WG16_N128(TY, C, SD, TN) \
  HK_WG16(128, TY, HK_WG16_REGS64, "{%64, %65, %66, %67}, %68", HK_WG16_ACC64, C, SD, TN)

// d (64 x 64, this warp's 16 rows as 8 n8 tiles) (+)= A x B: B K-major (N = 64 rows of 16 K elements).
template <bool kF16, bool kFirst>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (kF16 && kFirst) {
    HK_WG16_N64("f16", HK_WG16_W, "0", "0");
  } else if constexpr (kF16) {
    HK_WG16_N64("f16", HK_WG16_RW, "1", "0");
  } else if constexpr (kFirst) {
    HK_WG16_N64("bf16", HK_WG16_W, "0", "0");
  } else {
    HK_WG16_N64("bf16", HK_WG16_RW, "1", "0");
  }
}

// d (64 x 128, this warp's 16 rows as 16 n8 tiles) += A x B: B N-major (16 K rows of 128 N elements).
template <bool kF16>
__device__ __forceinline__ void wgmma_m64n128k16_rs_tn(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (kF16) {
    HK_WG16_N128("f16", HK_WG16_RW, "1", "1");
  } else {
    HK_WG16_N128("bf16", HK_WG16_RW, "1", "1");
  }
}

// d (64 x 64) (+)= A x B with e4m3 operands, k32: A from registers (this warp's rows as an mma.sync m16n8k32 A
// fragment: a0 row g, k 4 t4 .. 4 t4 + 3; a1 row g + 8; a2 / a3 k + 16), B K-major (64 rows of 32 bytes).
// (e4m3 has no transposed B: no tnsp operand)
#define HK_WG8_N64(C, SD)                                                                                     \
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " HK_WG16_REGS32                        \
               ", {%32, %33, %34, %35}, %36, " SD ", 1, 1;\n"                                                  \
               : HK_WG16_ACC32(C)                                                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
template <bool kFirst>
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (kFirst) {
    HK_WG8_N64(HK_WG16_W, "0");
  } else {
    HK_WG8_N64(HK_WG16_RW, "1");
  }
}

// Pins a 32-bit register that an in-flight wgmma reads (an A fragment): it stays live, unchanged, until here.
__device__ __forceinline__ void wgmma_fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

#undef HK_WG8_N64
#undef HK_WG16_N64
#undef HK_WG16_N128
#undef HK_WG16
#undef HK_WG16_REGS32
#undef HK_WG16_REGS64
#undef HK_WG16_W
#undef HK_WG16_RW
#undef HK_WG16_ACC64
#undef HK_WG16_ACC32
#undef HK_WG16_ACC4

#undef HK_WGMMA_E4M3
#undef HK_WGMMA_E4M3_N
#undef HK_WGMMA_ACC4
#undef HK_WGMMA_ACC8
#undef HK_WGMMA_ACC32
#undef HK_WGMMA_ACC48
#undef HK_WGMMA_ACC64
#undef HK_WGMMA_ACC96
#undef HK_WGMMA_RW
#undef HK_WGMMA_W
#undef HK_WGMMA_REGS8
#undef HK_WGMMA_REGS32
#undef HK_WGMMA_REGS48
#undef HK_WGMMA_REGS64
#undef HK_WGMMA_REGS96

}  // namespace ptx
}  // namespace hopperkit
