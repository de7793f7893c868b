// The weight gradient of a pointwise convolution (1x1, no padding, one group, any stride: the
// ResNets' bottleneck convolutions and strided shortcuts) on blocked bf16 activations under
// --precision bf16, with AVX-512 BF16's pair dot products. oneDNN's backward-weights kernel runs
// ResNet-50's at 215-435 GFLOP/s a core where its forward runs them at 485-525 (8 samples a
// thread; it transposes both operands per call, then every thread's partial is reordered out of
// its blocked layout and the partials added); this one at 410-470 on the same shapes, one core
// alone. Here
//   dW[m, c] = sum over n, p of dY[n, m, p] * X[n, c, at(p)]   (at(p): (oh * s0, ow * s1))
// is one product per 16x16 tile of dW (16 output by 16 input channels), accumulated in f32:
// the tile's 16 accumulators (one per output channel, 16 input channels as lanes) take two
// positions p, p + 1 at a time: X's two rows [16] interleaved into 16 bf16 pairs (one permute of
// a 64-byte load; a strided convolution's X rows copied dense first) against each output
// channel's pair of dY values broadcast from memory (dY's rows interleaved the same way once per
// sample and block of 16 output channels). The products are summed in f32 over a group of samples
// (as many as the shape's dY pairs allow in a core's L2), the groups' sums added to dW in order; a
// tile belongs to one thread: the same bits for any thread count. dX stays with oneDNN.
#include "kernels/cpu/conv.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/current_pool.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"
#include "runtime/thread_pool.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define CB_HAVE_BF16_PAIRS 1
#endif

namespace cb::cpu {

#ifdef CB_HAVE_BF16_PAIRS
namespace {

#define CB_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define CB_BF16_INLINE CB_BF16_TARGET __attribute__((always_inline)) inline

// Lane i of a 64-byte row pair [r0[0..15], r1[0..15]] (bf16) -> the pair (r0[i], r1[i]).
alignas(64) constexpr uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                  21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                  11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

// Rows p, p + 1 of one block [P][16] (bf16) as 16 pairs: pair i holds (s[p][i], s[p + 1][i]);
// `last`: p is the odd last row, paired with 0.
CB_BF16_INLINE __m512i interleaved(const uint16_t* s, int64_t p, bool last = false) {
  const __m512i v = last ? _mm512_maskz_loadu_epi16(0xffff, s + p * 16)  // the row and 16 zeros
                         : _mm512_loadu_si512(s + p * 16);
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), v);
}

// d[(p / 2) * 16 + i] = the pair (s[p][i], s[p + 1][i]) of block s [P][16].
CB_BF16_TARGET void interleave_block(const uint16_t* s, uint32_t* d, int64_t rows) {
  int64_t p = 0;
  for (; p + 2 <= rows; p += 2) _mm512_storeu_si512(d + p * 8, interleaved(s, p));
  if (p < rows) _mm512_storeu_si512(d + p * 8, interleaved(s, p, true));
}

// acc[o] += the pair products of x's 16 pairs (lanes) and output channel o's pair d[o].
CB_BF16_INLINE void add_pair_products(__m512 acc[16], __m512i xv, const uint32_t* d) {
  const auto* di = reinterpret_cast<const int*>(d);
#pragma GCC unroll 16
  for (int o = 0; o < 16; ++o)  // d[o] broadcast from memory
    acc[o] = _mm512_dpbf16_ps(acc[o], reinterpret_cast<__m512bh>(xv),
                              reinterpret_cast<__m512bh>(_mm512_set1_epi32(di[o])));
}

// acc[o][i] (16 output channels o, 16 input channels i as lanes) += sum over p of
// dy[p][o] * x[p][i], for x's block [P][16] bf16 and dy's pairs from interleave_block. Meanwhile
// the blocks read next (`next_x`, `next_dy` where not null, [P][16]) are prefetched a cache line
// per step: streamed from memory as they are, the 56x56 shapes ran at 365-385 GFLOP/s a core,
// prefetched at 445-460.
CB_BF16_INLINE void tile_products(const uint16_t* x, const uint32_t* dy_pairs, int64_t rows,
                                  const uint16_t* next_x, const uint16_t* next_dy, __m512 acc[16]) {
  int64_t p = 0;
  for (; p + 2 <= rows; p += 2) {
    _mm_prefetch(reinterpret_cast<const char*>(next_x + p * 16), _MM_HINT_T1);
    if (next_dy) _mm_prefetch(reinterpret_cast<const char*>(next_dy + p * 16), _MM_HINT_T1);
    add_pair_products(acc, interleaved(x, p), dy_pairs + p * 8);
  }
  if (p < rows) add_pair_products(acc, interleaved(x, p, true), dy_pairs + p * 8);
}

// The samples a tile sums before adding to dW: as many as keep their dY pairs for one block of
// output channels within this many bytes (in a core's L2). One sample at a time, a 7x7 tile
// spent as long adding its 16x16 sums to dW (out of cache: 4 MiB for 2048x512) as computing
// them (255-270 GFLOP/s a core in training); 14x14, 370-380.
constexpr int64_t kGroupBytes = int64_t{256} << 10;

// Tiles [t0, t1) of dW [M, C] (tile t: output block t / cb, input block t % cb), every sample;
// `rows` positions in X's and dY's blocks.
CB_BF16_TARGET void weight_tiles(const uint16_t* x, const uint16_t* dy, float* dw, int64_t n,
                                 int64_t c, int64_t m, int64_t rows, int64_t t0, int64_t t1) {
  const int64_t cb = c / 16, mb = m / 16, block = rows * 16;
  const int64_t pair_block = (rows + 1) / 2 * 16;  // uint32 pairs of one sample's block
  const int64_t group =
      std::clamp<int64_t>(kGroupBytes / (pair_block * int64_t{sizeof(uint32_t)}), 1, n);
  uint32_t* pairs = scratch<uint32_t, 0>(group * pair_block);
  auto x_block = [&](int64_t i, int64_t b) { return x + (i * cb + b) * block; };
  auto dy_block = [&](int64_t i, int64_t b) { return dy + (i * mb + b) * block; };
  for (int64_t i0 = 0; i0 < n; i0 += group) {
    const int64_t i1 = std::min(n, i0 + group);
    int64_t have = -1;  // the output block whose dY pairs `pairs` holds
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t ob = t / cb, ib = t % cb;
      if (ob != have) {
        for (int64_t i = i0; i < i1; ++i)
          interleave_block(dy_block(i, ob), pairs + (i - i0) * pair_block, rows);
        have = ob;
      }
      // Read next: this tile's next sample, else the next tile (t0 of the next group).
      const bool last = t + 1 == t1;
      const int64_t nt = last ? t0 : t + 1, nob = nt / cb, next_i0 = last ? i1 : i0;
      __m512 acc[16];
#pragma GCC unroll 16
      for (int o = 0; o < 16; ++o) acc[o] = _mm512_setzero_ps();
      for (int64_t i = i0; i < i1; ++i) {
        const uint16_t* next_x =
            i + 1 < i1 ? x_block(i + 1, ib) : x_block(std::min(next_i0, n - 1), nt % cb);
        const uint16_t* next_dy =
            nob != ob || last ? dy_block(std::min(next_i0 + (i - i0), n - 1), nob) : nullptr;
        tile_products(x_block(i, ib), pairs + (i - i0) * pair_block, rows, next_x, next_dy, acc);
      }
      float* w = dw + ob * 16 * c + ib * 16;
#pragma GCC unroll 16
      for (int o = 0; o < 16; ++o)
        _mm512_storeu_ps(w + o * c,
                         i0 ? _mm512_add_ps(_mm512_loadu_ps(w + o * c), acc[o]) : acc[o]);
    }
  }
}

bool bf16_pairs_available() {
  static const bool yes = __builtin_cpu_supports("avx512bf16") != 0;
  return yes;
}

}  // namespace

bool conv_grad_pointwise_weights(const KernelArgs& a) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &dY = a.in[0], &X = a.in[1], &W = a.in[2];
  if (a.out.size() < 2 || !a.out[1].present() || !p.bf16 || !bf16_pairs_available()) return false;
  const TensorView& dW = a.out[1];
  const auto& win = p.window;
  if (X.rank() != 4 || dY.rank() != 4 || W.rank() != 4 || dW.dtype != DType::F32) return false;
  const int64_t n = X.dims[0], c = X.dims[1], m = dY.dims[1];
  const bool shape_ok =
      p.group == 1 && W.dims[0] == m && W.dims[1] == c && W.dims[2] == 1 && W.dims[3] == 1 &&
      c % 16 == 0 && m % 16 == 0 && dY.dims[0] == n && win.strides.size() == 2 &&
      win.strides[0] >= 1 && win.strides[1] >= 1 &&
      dY.dims[2] == (X.dims[2] - 1) / win.strides[0] + 1 &&
      dY.dims[3] == (X.dims[3] - 1) / win.strides[1] + 1 &&
      std::all_of(win.pads.begin(), win.pads.end(), [](int64_t v) { return v == 0; });
  const bool layout_ok = X.blocked && X.bf16_storage && dY.blocked && dY.bf16_storage;
  const int64_t rows = dY.dims[2] * dY.dims[3], x_rows = X.dims[2] * X.dims[3];
  if (!shape_ok || !layout_ok || n == 0 || rows == 0 || c == 0 || m == 0) return false;
  ThreadPool* pool = current_pool();
  // A strided convolution reads X at (oh * s0, ow * s1) only: those rows of each block, copied
  // once (a quarter of X at stride 2) so that the tiles read them as a dense block. Reading them
  // in place (two 32-byte rows a pair) ran the strided shortcuts at 315-340 GFLOP/s a core.
  const uint16_t* x = X.ptr<uint16_t>();
  if (rows != x_rows) {
    const int64_t blocks = n * (c / 16), s0 = win.strides[0], s1 = win.strides[1];
    uint16_t* sub = scratch<uint16_t, 0>(blocks * rows * 16);
    parallel(blocks, rows * 16, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t oh = 0; oh < dY.dims[2]; ++oh) {
          const uint16_t* src = x + (b * x_rows + oh * s0 * X.dims[3]) * 16;
          uint16_t* dst = sub + (b * rows + oh * dY.dims[3]) * 16;
          for (int64_t ow = 0; ow < dY.dims[3]; ++ow)
            std::copy(src + ow * s1 * 16, src + ow * s1 * 16 + 16, dst + ow * 16);
        }
    });
    x = sub;
  }
  const int64_t tiles = (m / 16) * (c / 16);
  const int64_t parts = std::min<int64_t>(pool ? pool->size() : 1, tiles);
  auto run = [&](int64_t q) {  // part q: a contiguous range of tiles, for every sample
    weight_tiles(x, dY.ptr<uint16_t>(), dW.ptr<float>(), n, c, m, rows, q * tiles / parts,
                 (q + 1) * tiles / parts);
  };
  if (parts <= 1) {
    run(0);
  } else {
    pool->parallel_for(parts, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) run(q);
    });
  }
  return true;
}

#else
bool conv_grad_pointwise_weights(const KernelArgs&) { return false; }
#endif

}  // namespace cb::cpu
