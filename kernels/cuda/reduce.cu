// (being written)
#include "kernels/cuda/launch.h"

namespace cb::CB_GPU_NS {
std::span<const GpuKernel> reduce_kernels() { return {}; }
}  // namespace cb::CB_GPU_NS
