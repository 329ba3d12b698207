// hopperkit: launching a kernel with Programmatic Dependent Launch (host only). The kernel may start while the
// previous kernel in the stream finishes; it must call griddepcontrol.wait (ptx::grid_dependency_wait) before
// it reads that kernel's results.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "hopperkit/error.h"

namespace hopperkit {

// The launch attribute for clusters of `cluster` CTAs along x (launch_with_pdl_cluster, resident_ctas).
inline cudaLaunchAttribute cluster_dim_attr(int cluster) {
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  return attr;
}

// The same in clusters of `cluster` CTAs along x (1: no cluster attribute); grid.x must be a multiple of it.
template <class... Params, class... Args>
void launch_with_pdl_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_smem, int cluster,
                             cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = dynamic_smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1] = cluster_dim_attr(cluster);
  cfg.attrs = attr;
  cfg.numAttrs = cluster > 1 ? 2 : 1;
  HK_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

template <class... Params, class... Args>
void launch_with_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream,
                     Args&&... args) {
  launch_with_pdl_cluster(kernel, grid, block, dynamic_smem, 1, stream, std::forward<Args>(args)...);
}

}  // namespace hopperkit
