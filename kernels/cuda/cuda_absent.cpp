// The CUDA entry points of a build without the CUDA toolkit (cuda_device.h): no GPU is usable,
// and every request for one says why.
#include "kernels/cuda/cuda_device.h"
#include "runtime/collective.h"
#include "runtime/error.h"

namespace cb {

namespace {
constexpr const char* kWhy =
    "crossbow was built without the CUDA toolkit (install it and rebuild to use GPUs)";
}

bool cuda_backend_built() { return false; }

bool cuda_kernel_exists(OpKind, DType) { return false; }

int cuda_device_count(std::string* why) {
  if (why) *why = kWhy;
  return 0;
}

std::unique_ptr<Device> make_cuda_device(int ordinal, const CudaOptions&) {
  fail("cuda:{}: {}", ordinal, kWhy);
}

std::vector<std::unique_ptr<Collective>> make_nccl_collectives(const std::vector<Device*>&) {
  fail("NCCL: {}", kWhy);
}

std::string nccl_unique_id() { fail("NCCL: {}", kWhy); }

std::vector<std::unique_ptr<Collective>> make_nccl_collectives(
    const std::vector<Device*>&, const NcclJob&, std::vector<std::unique_ptr<Collective>>) {
  fail("NCCL: {}", kWhy);
}

}  // namespace cb
