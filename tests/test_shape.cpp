#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

#include "runtime/shape.h"

using namespace cb;

TEST_CASE("dims in terms of the batch size") {
  CHECK(to_string(Shape{Dim::N(), Dim::of(3)}) == "[N,3]");
  CHECK(*dim_mul(Dim::N(), Dim::of(4)) == Dim::N(4));
  CHECK(!dim_mul(Dim::N(), Dim::N()));
  CHECK(*dim_div(Dim::N(4), Dim::of(2)) == Dim::N(2));
  CHECK(*dim_div(Dim::N(4), Dim::N()) == Dim::of(4));
  CHECK(!dim_div(Dim::N(3), Dim::of(2)));
  // INT64_MIN / -1 traps in hardware: not folded (no SIGFPE at import), other quotients by -1 are.
  CHECK(!dim_div(Dim::of(std::numeric_limits<int64_t>::min()), Dim::of(-1)));
  CHECK(*dim_div(Dim::of(-7), Dim::of(-1)) == Dim::of(7));
  CHECK(*broadcast({Dim::N(), Dim::of(1)}, {Dim::of(5)}) == Shape{Dim::N(), Dim::of(5)});
  CHECK(!broadcast({Dim::of(3)}, {Dim::of(4)}));
  CHECK(*shape_numel({Dim::N(), Dim::of(16), Dim::of(4)}) == Dim::N(64));
}
