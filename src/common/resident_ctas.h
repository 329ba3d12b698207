// The size of a persistent grid (host only): the MoE GEMMs and reduce, the prologue's pair kernel; the SM count;
// a kernel's dynamic shared memory limit, raised once per device.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "common/pdl_launch.h"
#include "hopperkit/error.h"

namespace hopperkit {

constexpr int kMaxDevices = 64;  // per-device launch caches (resident CTAs) hold this many devices

// The current device's ordinal, checked against the per-device caches' size.
inline int current_device() {
  int dev = 0;
  HK_CUDA_CHECK(cudaGetDevice(&dev));
  HK_CHECK(kDevice, dev >= 0 && dev < kMaxDevices, "device", "an ordinal below 64", dev);
  return dev;
}

// SMs of the current device, queried on the first call per device and cached (host only).
inline int device_sm_count() {
  static std::atomic<int> cache[kMaxDevices] = {};
  const int dev = current_device();
  int sms = cache[dev].load(std::memory_order_acquire);
  if (sms == 0) {
    HK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cache[dev].store(sms, std::memory_order_release);
  }
  return sms;
}

// CTAs of `kernel` resident at once on the current device (occupancy per SM x SMs), measured on the first call
// per device and kept in `cache` (one per kernel; threads racing on the first call store the same value).
// A kernel with dynamic shared memory gets its maximum set first. `what` names the kernel in the error.
// cluster > 1: launched in clusters of that many CTAs along x, whole clusters only (cudaOccupancyMaxActiveClusters:
// a cluster's CTAs share one GPC, so an SM that no partner can join stays idle), times the cluster size.
template <class Kernel>
int resident_ctas(Kernel kernel, int threads, int smem_bytes, std::atomic<int> (&cache)[kMaxDevices],
                  const char* what, int cluster = 1) {
  const int dev = current_device();
  int res = cache[dev].load(std::memory_order_acquire);
  if (res == 0) {
    if (smem_bytes > 0) {
      HK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    }
    if (cluster <= 1) {
      int per_sm = 0;
      HK_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes));
      HK_CHECK(kUnsupported, per_sm >= 1, what, "at least one resident CTA per SM", per_sm);
      res = per_sm * device_sm_count();
    } else {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(static_cast<unsigned>(cluster * device_sm_count()));
      cfg.blockDim = dim3(static_cast<unsigned>(threads));
      cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
      cudaLaunchAttribute attr[1] = {cluster_dim_attr(cluster)};
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      HK_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
      HK_CHECK(kUnsupported, clusters >= 1, what, "at least one resident cluster", clusters);
      res = clusters * cluster;
    }
    cache[dev].store(res, std::memory_order_release);
  }
  return res;
}

// Raises `kernel`'s dynamic shared memory limit to `smem_bytes` on the current device on the first call per
// device (`done`: one flag array per kernel and limit), so that launches do not pay a cudaFuncSetAttribute
// each. The attribute belongs to the function in a context: the flags assume one context per device (the
// runtime's primary one, as torch uses); a launch in another context without it fails its launch check.
template <class Kernel>
void set_max_dynamic_smem_once(Kernel kernel, int smem_bytes, std::atomic<int> (&done)[kMaxDevices]) {
  const int dev = current_device();
  if (done[dev].load(std::memory_order_acquire) == 0) {
    HK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    done[dev].store(1, std::memory_order_release);
  }
}

}  // namespace hopperkit
