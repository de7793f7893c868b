// A convolution's f32 weights rounded to bf16 in the blocked layout its oneDNN primitive reads,
// once per call by the current pool's threads, for every thread's primitive: where each thread ran
// oneDNN's own reorder of the whole tensor for its sub-batch (ResNet-50 bf16: about 24 ms of a
// 600 ms step, the forward's and backward-data's layouts together). oneDNN's blocked layouts
// place each dimension's index by itself: an element's offset is a sum over dimensions of
// (index / the dimension's inner block) x its outer stride plus its place inside the inner
// blocks (e.g. 8b16a2b: input channel i at ((i % 16) / 2) x 32 + i % 2, output channel o at
// (o % 16) x 2), so one table of source offsets for the inner block and one outer stride a
// dimension describe any of them.
#include "kernels/cpu/dnnl_conv_util.h"

#ifdef CB_HAVE_DNNL
#include <algorithm>
#include <array>
#include <vector>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/storage.h"

namespace cb::cpu::dnnl_conv {

bool weights_to_bf16(const float* src, const dnnl::memory::desc& want, uint16_t* dst) {
  const dnnl_memory_desc_t& d = want.data;
  if (d.format_kind != dnnl_blocked || d.data_type != dnnl_bf16 || d.extra.flags != 0 ||
      d.offset0 != 0 || d.ndims < 1 || d.ndims > DNNL_MAX_NDIMS)
    return false;
  const int r = d.ndims;
  const auto& b = d.format_desc.blocking;
  std::array<int64_t, DNNL_MAX_NDIMS> inner{}, outer{}, src_stride{};
  int64_t inner_size = 1;
  for (int k = 0; k < r; ++k) inner[k] = 1;
  for (int k = 0; k < b.inner_nblks; ++k) {
    inner[b.inner_idxs[k]] *= b.inner_blks[k];
    inner_size *= b.inner_blks[k];
  }
  int64_t outer_count = 1, stride = 1;
  for (int k = r - 1; k >= 0; --k) {  // padded dims (a 3-channel stem) stay with oneDNN
    if (d.padded_dims[k] != d.dims[k] || d.dims[k] % inner[k] != 0) return false;
    outer[k] = d.dims[k] / inner[k];
    outer_count *= outer[k];
    src_stride[k] = stride;  // the f32 source is row-major over the same dims
    stride *= d.dims[k];
  }
  if (outer_count * inner_size != stride || want.get_size() != size_t(stride) * 2) return false;
  // Source offset of each place in the inner block: its digits, outermost block first.
  std::vector<int32_t> inner_src(static_cast<size_t>(inner_size));
  for (int64_t q = 0; q < inner_size; ++q) {
    std::array<int64_t, DNNL_MAX_NDIMS> idx{};
    int64_t rest = q, scale_of[DNNL_MAX_NDIMS];
    for (int k = 0; k < r; ++k) scale_of[k] = 1;
    for (int k = b.inner_nblks - 1; k >= 0; --k) {  // innermost block first
      const int dim = b.inner_idxs[k];
      idx[dim] += rest % b.inner_blks[k] * scale_of[dim];
      scale_of[dim] *= b.inner_blks[k];
      rest /= b.inner_blks[k];
    }
    int64_t off = 0;
    for (int k = 0; k < r; ++k) off += idx[k] * src_stride[k];
    inner_src[static_cast<size_t>(q)] = static_cast<int32_t>(off);
  }
  const int32_t* table = inner_src.data();
  parallel(outer_count, inner_size, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {  // outer tuple t, row-major over the outer dims
      int64_t rest = t, dst_off = 0, src_off = 0;
      for (int k = r - 1; k >= 0; --k) {
        const int64_t x = rest % outer[k];
        rest /= outer[k];
        dst_off += x * b.strides[k];
        src_off += x * inner[k] * src_stride[k];
      }
      const float* s = src + src_off;
      uint16_t* o = dst + dst_off;
      for (int64_t q = 0; q < inner_size; ++q) store_s(o, q, s[table[q]]);
    }
  });
  return true;
}

}  // namespace cb::cpu::dnnl_conv
#endif
