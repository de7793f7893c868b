#include <doctest/doctest.h>

#include "runtime/shape.h"

using namespace cb;

TEST_CASE("dims in terms of the batch size") {
  CHECK(to_string(Shape{Dim::N(), Dim::of(3)}) == "[N,3]");
  CHECK(*dim_mul(Dim::N(), Dim::of(4)) == Dim::N(4));
  CHECK(!dim_mul(Dim::N(), Dim::N()));
  CHECK(*dim_div(Dim::N(4), Dim::of(2)) == Dim::N(2));
  CHECK(*dim_div(Dim::N(4), Dim::N()) == Dim::of(4));
  CHECK(!dim_div(Dim::N(3), Dim::of(2)));
  CHECK(*broadcast({Dim::N(), Dim::of(1)}, {Dim::of(5)}) == Shape{Dim::N(), Dim::of(5)});
  CHECK(!broadcast({Dim::of(3)}, {Dim::of(4)}));
  CHECK(*shape_numel({Dim::N(), Dim::of(16), Dim::of(4)}) == Dim::N(64));
}
