#include "base/deadline.h"

#include <catch2/catch.hpp>

using namespace rankcheck;

TEST_CASE("deadline: a margin added to never() stays never(), without overflow") {
  Deadline never = Deadline::never();
  CHECK(never.extended(Millis(250)).when() == Clock::time_point::max());
  CHECK(never.extended(std::chrono::hours(24 * 365)).when() == Clock::time_point::max());
  CHECK(never.extended(Millis(300)).remaining() == Millis(INT32_MAX));
  CHECK(!never.extended(Millis(1)).expired());
}

TEST_CASE("deadline: a margin moves a finite deadline later by exactly that") {
  Deadline d = Deadline::after(Millis(100));
  CHECK(d.extended(Millis(50)).when() == d.when() + Millis(50));
  CHECK(d.extended(Millis(0)).when() == d.when());
  CHECK(d.extended(Millis(-5)).when() == d.when());  // never earlier
}
