// A convolution's f32 weights rounded to bf16 in the blocked layout its oneDNN primitive reads,
// once per call by the current pool's threads, for every thread's primitive: where each thread ran
// oneDNN's own reorder of the whole tensor for its sub-batch (ResNet-50 bf16: about 24 ms of a
// 600 ms step, the forward's and backward-data's layouts together). oneDNN's blocked layouts
// place each dimension's index by itself: an element's offset is a sum over dimensions of
// (index / the dimension's inner block) x its outer stride plus its place inside the inner
// blocks (e.g. 8b16a2b: input channel i at ((i % 16) / 2) x 32 + i % 2, output channel o at
// (o % 16) x 2), so one table of source offsets for the inner block and one outer stride a
// dimension describe any of them. The source lines a block reads are prefetched a few blocks
// ahead, and with AVX-512 a block is gathered and rounded 16 values at a time.
#include "kernels/cpu/dnnl_conv_util.h"

#ifdef CB_HAVE_DNNL
#include <algorithm>
#include <array>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/storage.h"

namespace cb::cpu::dnnl_conv {

namespace {

// One outer tuple: o[q] = bf16(s[table[q]]) for q in [0, n), store_s's rounding (nearest even,
// NaN a quiet NaN). With AVX-512 (every core with bf16 convolutions has it) 16 at a time by a
// gather and integer rounding, the same bits.
#if defined(__x86_64__) && defined(__GNUC__)
#define CB_WEIGHTS_AVX512 1
typedef uint32_t Bits16 __attribute__((vector_size(64)));
typedef uint16_t Half16 __attribute__((vector_size(32)));
__attribute__((target("avx512f"))) void tuple_avx512(const float* s, uint16_t* o,
                                                     const int32_t* table, int64_t n) {
  int64_t q = 0;
  for (; q + 16 <= n; q += 16) {
    const __m512i idx = _mm512_loadu_si512(table + q);
    const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xffff, idx, s, 4);
    Bits16 u;
    __builtin_memcpy(&u, &v, sizeof u);
    const Bits16 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
    const Bits16 bits = (u & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
    const Half16 h = __builtin_convertvector(bits, Half16);
    __builtin_memcpy(o + q, &h, sizeof h);
  }
  for (; q < n; ++q) store_s(o, q, s[table[q]]);
}
#endif

void tuple_scalar(const float* s, uint16_t* o, const int32_t* table, int64_t n) {
  for (int64_t q = 0; q < n; ++q) store_s(o, q, s[table[q]]);
}

}  // namespace

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
  // The cache lines an inner block reads (offsets in floats, one per 64 bytes touched), fetched
  // kAhead tuples early: a tuple reads 16 or more rows of the source a line each, more streams
  // than the cores' prefetchers follow. Two threads, from memory: 2048x512 1x1 (forward layout)
  // 0.67-0.96 ms one value at a time, 0.49 prefetched, 0.30-0.32 gathered 16 at a time too;
  // 512x512x3x3 1.32-1.46, 1.25, 0.82-0.84.
  std::vector<int32_t> lines;
  for (int32_t off : inner_src) lines.push_back(off / 16 * 16);
  std::sort(lines.begin(), lines.end());
  lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
  auto src_of = [&](int64_t t) {  // outer tuple t's first source element
    int64_t rest = t, src_off = 0;
    for (int k = r - 1; k >= 0; --k) {
      const int64_t x = rest % outer[k];
      rest /= outer[k];
      src_off += x * inner[k] * src_stride[k];
    }
    return src_off;
  };
  constexpr int64_t kAhead = 8;
  auto* tuple = tuple_scalar;
#ifdef CB_WEIGHTS_AVX512
  if (__builtin_cpu_supports("avx512f")) tuple = tuple_avx512;
#endif
  parallel(outer_count, inner_size, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {  // outer tuple t, row-major over the outer dims
      if (t + kAhead < t1) {
        const float* next = src + src_of(t + kAhead);
        for (int32_t off : lines) __builtin_prefetch(next + off);
      }
      int64_t rest = t, dst_off = 0;
      for (int k = r - 1; k >= 0; --k) {
        dst_off += rest % outer[k] * b.strides[k];
        rest /= outer[k];
      }
      tuple(src + src_of(t), dst + dst_off, table, inner_size);
    }
  });
  return true;
}

}  // namespace cb::cpu::dnnl_conv
#endif
