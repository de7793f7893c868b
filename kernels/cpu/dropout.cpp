// Dropout(data, ratio?, training_mode?) -> output [d...], mask? [d...].
// Training: element i is kept when uniform01(seed, i) >= ratio (math::uniform01, a counter-based
// hash), kept values are scaled by 1/(1-ratio); the mask is bool (or data's float type before
// opset 10). The seed is KernelArgs::seed (per node and step), mixed with the node's `seed`
// attribute when it has one, so a mask depends on the seed only, not on the thread split.
// Inference (or ratio 0): output = data, mask all true.
#include <algorithm>

#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

void Dropout(const KernelArgs& a) {
  const auto& p = a.p<ops::DropoutParams>();
  const TensorView &in = a.in[0], &out = a.out[0];
  const TensorView* mask = a.out.size() > 1 && a.out[1].present() ? &a.out[1] : nullptr;
  const int64_t n = in.numel();
  const bool drop = p.training && p.ratio > 0;
  if (!drop) {
    copy_if_distinct(in, out);
    if (mask)
      dispatch_numeric(
          mask->dtype,
          [&]<class M>(Tag<M>) { std::fill(mask->ptr<M>(), mask->ptr<M>() + n, M(1)); }, true);
    return;
  }
  uint64_t seed = a.seed;
  if (p.seed) seed = math::splitmix64(seed ^ math::splitmix64(static_cast<uint64_t>(*p.seed)));
  const float ratio = p.ratio;
  dispatch_float(in.dtype, [&]<class T>(Tag<T>) {
    const T* x = in.ptr<const T>();
    T* y = out.ptr<T>();
    const T scale = T(1) / (T(1) - static_cast<T>(ratio));
    auto run = [&]<class M>(M* m) {
      parallel(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          bool keep = math::uniform01(seed, static_cast<uint64_t>(i)) >= ratio;
          y[i] = keep ? x[i] * scale : T(0);
          if (m) m[i] = M(keep);
        }
      });
    };
    if (!mask)
      run(static_cast<bool*>(nullptr));
    else if (mask->dtype == DType::Bool)
      run(mask->ptr<bool>());
    else
      run(mask->ptr<T>());  // opset < 10: the mask has data's type
  });
}

}  // namespace cb::cpu
