// Relu, ReluGrad, Clip, ClipGrad and same-shape Add on activations stored as bf16
// (TensorView::bf16_storage: the blocked activations of --precision bf16, where
// assign_blocked_layouts gives every tensor operand of these ops the same storage). Elementwise,
// so the blocked layout does not matter: each element is widened to float, computed with the
// same element math as the f32 kernels (kernels/common/scalar_math.h) and rounded back to bf16
// (nearest even). CpuDevice::launch sends these ops here when an operand is stored as bf16.
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/common/scalar_math.h"
#include "kernels/cpu/current_pool.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/storage.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {

const uint16_t* in16(const KernelArgs& a, size_t i) {
  CB_CHECK(a.in[i].bf16_storage && a.in[i].numel() == a.out[0].numel());
  return static_cast<const uint16_t*>(a.in[i].data);
}

// out = f(in 0) or f(in 0, in 1), every element, in float.
template <class F>
CB_CPU_CLONES void map1_range(const uint16_t* x, uint16_t* y, int64_t b, int64_t e, F f) {
  for (int64_t i = b; i < e; ++i) store_s(y, i, f(load_s(x, i)));
}
template <class F>
CB_CPU_CLONES void map2_range(const uint16_t* x, const uint16_t* z, uint16_t* y, int64_t b,
                              int64_t e, F f) {
  for (int64_t i = b; i < e; ++i) store_s(y, i, f(load_s(x, i), load_s(z, i)));
}

template <class F>
void map1(const KernelArgs& a, F f) {
  const uint16_t* x = in16(a, 0);
  auto* y = static_cast<uint16_t*>(a.out[0].data);
  parallel(a.out[0].numel(), 1, [&](int64_t b, int64_t e) { map1_range(x, y, b, e, f); });
}
template <class F>
void map2(const KernelArgs& a, F f) {
  const uint16_t *x = in16(a, 0), *z = in16(a, 1);
  auto* y = static_cast<uint16_t*>(a.out[0].data);
  parallel(a.out[0].numel(), 1, [&](int64_t b, int64_t e) { map2_range(x, z, y, b, e, f); });
}

// A Clip bound: input i when given (an f32 scalar), else the attribute (+-inf when absent).
float bound(const KernelArgs& a, size_t i, float attr) {
  if (a.in.size() > i && a.in[i].present()) return *static_cast<const float*>(a.in[i].data);
  return attr;
}

}  // namespace

bool bf16_storage_elementwise(OpKind op, const KernelArgs& a) {
  CB_CHECK(a.out[0].bf16_storage);
  switch (op) {
    case OpKind::Relu:
      map1(a, [](float x) { return math::ReluOp{}(x); });
      return true;
    case OpKind::ReluGrad:
      map2(a, [](float dy, float y) { return math::ReluGradOp{}(dy, y); });
      return true;
    case OpKind::Add:
      map2(a, [](float x, float z) { return x + z; });
      return true;
    case OpKind::Clip: {
      const auto& p = a.p<ops::ClipParams>();
      const math::ClipOp<float> clip{bound(a, 1, p.min), bound(a, 2, p.max)};
      map1(a, [clip](float x) { return clip(x); });
      return true;
    }
    case OpKind::ClipGrad: {
      const auto& p = a.p<ops::ClipParams>();
      const math::ClipGradOp<float> grad{bound(a, 2, p.min), bound(a, 3, p.max)};
      map2(a, [grad](float dy, float x) { return grad(dy, x); });
      return true;
    }
    default:
      return false;
  }
}

}  // namespace cb::cpu
