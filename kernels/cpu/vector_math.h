// glibc's vector math (libmvec) for the hot loops of one file: including this declares erff,
// expf and tanhf with GCC's simd attribute, as glibc's own <bits/math-vector.h> does only under
// -ffast-math, so that GCC vectorises loops calling them into calls of the vector variants
// (_ZGVeN16v_expf and the like: within a few ulp of the scalar functions) in every
// target_clones variant (kernel_util.h's CB_CPU_CLONES). IEEE semantics stay as they are
// everywhere else. A file including it must be compiled with -fno-math-errno (CMakeLists.txt:
// CB_VECTOR_MATH_SOURCES), or GCC keeps expf scalar, as it may set errno.
#pragma once

#include <math.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
extern "C" float erff(float) noexcept __attribute__((simd("notinbranch")));
extern "C" float expf(float) noexcept __attribute__((simd("notinbranch")));
extern "C" float tanhf(float) noexcept __attribute__((simd("notinbranch")));
#endif
