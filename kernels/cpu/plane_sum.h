// Summing one contiguous run of values fast and accurately enough for statistics (BatchNorm's
// batch mean/variance, GlobalAveragePool): kLanes independent accumulators so the loop
// vectorises (one accumulator serialises on the add latency, ~10x slower), totals in double.
#pragma once

#include <cstdint>

namespace cb::cpu {

constexpr int64_t kSumLanes = 16;

// sum over i in [0, n) of f(x[i]).
template <typename T, typename F>
double plane_sum(const T* x, int64_t n, F f) {
  T acc[kSumLanes] = {};
  int64_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes)
    for (int64_t l = 0; l < kSumLanes; ++l) acc[l] += f(x[j + l]);
  double total = 0;
  for (; j < n; ++j) total += f(x[j]);
  for (int64_t l = 0; l < kSumLanes; ++l) total += acc[l];
  return total;
}

template <typename T>
double plane_sum(const T* x, int64_t n) {
  return plane_sum(x, n, [](T v) { return v; });
}

}  // namespace cb::cpu
