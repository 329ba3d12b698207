// hopperkit: launching a kernel with Programmatic Dependent Launch (host only). The kernel may start while the
// previous kernel in the stream finishes; it must call griddepcontrol.wait (ptx::grid_dependency_wait) before
// it reads that kernel's results.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "hopperkit/error.h"

namespace hopperkit {

template <class... Params, class... Args>
void launch_with_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream,
                     Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = dynamic_smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  HK_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace hopperkit
