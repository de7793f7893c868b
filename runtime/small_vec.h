// A fixed-capacity vector stored inline: the list fields of kernel params (dims, axes, pads,
// permutations), so that every params struct a kernel reads is trivially copyable and can be
// handed to a GPU kernel by value. The API is the std::vector subset the ops use; going past the
// capacity is a cb::Error naming it (a model beyond crossbow's maximum rank), never an overflow.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "runtime/error.h"

namespace cb {

constexpr size_t kMaxRank = 8;  // the most dims a tensor may have in crossbow

template <class T, size_t N>
class SmallVec {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  SmallVec() = default;
  SmallVec(std::initializer_list<T> v) { assign(v.begin(), v.end()); }
  SmallVec(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit on purpose
  SmallVec(size_t n, const T& x) { resize(n, x); }
  template <class It>
  requires(!std::is_integral_v<It>) SmallVec(It b, It e) { assign(b, e); }
  SmallVec& operator=(std::initializer_list<T> v) {
    assign(v.begin(), v.end());
    return *this;
  }
  SmallVec& operator=(const std::vector<T>& v) {
    assign(v.begin(), v.end());
    return *this;
  }
  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT

  void assign(size_t n, const T& x) {
    check(n);
    std::fill_n(data_, n, x);
    size_ = n;
  }
  template <class It>
  requires(!std::is_integral_v<It>) void assign(It b, It e) {
    const auto n = static_cast<size_t>(std::distance(b, e));
    check(n);
    std::copy(b, e, data_);
    size_ = n;
  }
  void resize(size_t n, const T& x = T{}) {
    check(n);
    for (size_t i = size_; i < n; ++i) data_[i] = x;
    size_ = n;
  }
  void push_back(const T& x) {
    check(size_ + 1);
    data_[size_++] = x;
  }
  void clear() { size_ = 0; }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  static constexpr size_t capacity() { return N; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

  friend bool operator==(const SmallVec& a, const SmallVec& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  static void check(size_t n) {
    if (n > N)
      throw LimitError(
          fmt::format("{} values where crossbow supports at most {} (tensors of rank up to {})", n,
                      N, kMaxRank));
  }
  T data_[N] = {};
  size_t size_ = 0;
};

using DimList = SmallVec<int64_t, kMaxRank>;      // dims, axes, strides, a permutation
using PadList = SmallVec<int64_t, 2 * kMaxRank>;  // begins then ends
using SplitList = SmallVec<int64_t, 64>;          // Split's sizes (outputs)

}  // namespace cb
