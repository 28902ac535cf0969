// CUDA's descriptor (core/backend_descriptor.h), built with or without the CUDA backend.
#include "core/backend_descriptor.h"

namespace mixtrain::cuda {

const BackendDescriptor& descriptor() {
  static constexpr BackendDescriptor d{
      .type = DeviceType::kCUDA,
      .name = "cuda",
      .indexed = true,
      .summary = "a GPU, in builds with the CUDA backend; docs/cuda.md",
      .autocast_dtype = kFloat16,  // PyTorch's default on CUDA
      .autocast_ops = AutocastOpList::kCuda,
      .absent_reason = "this build of mixtrain has no CUDA backend (configure with -DMIXTRAIN_CUDA=ON, docs/cuda.md)",
      .collectives_absent_reason =
          "this build of mixtrain has no NCCL (configure with -DMIXTRAIN_NCCL=ON and "
          "NCCL_ROOT, docs/distributed.md); DDP reduces through host copies instead",
  };
  return d;
}

}  // namespace mixtrain::cuda
