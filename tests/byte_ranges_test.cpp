// The byte-range rules both validators share (runtime/engine/byte_ranges.hpp): exact overlap of real
// ranges, empty ranges overlapping nothing, a range past 2^64 never slipping through, alignment.
#include <doctest/doctest.h>

#include <cstdint>

#include "runtime/engine/byte_ranges.hpp"

namespace {

using shapejit::rt::byte_range;
using shapejit::rt::byte_ranges_overlap;
using shapejit::rt::ByteRange;

const void* at(uintptr_t address) { return reinterpret_cast<const void*>(address); }

// Overlap is symmetric; check both orders every time.
bool overlap(const ByteRange& a, const ByteRange& b) {
  const bool ab = byte_ranges_overlap(a, b);
  CHECK(ab == byte_ranges_overlap(b, a));
  return ab;
}

}  // namespace

TEST_CASE("byte ranges: overlap is exact for real ranges") {
  const ByteRange a = byte_range(at(0x1000), 0x40);  // [0x1000, 0x1040)
  CHECK(overlap(a, a));
  CHECK(overlap(a, byte_range(at(0x103f), 1)));       // its last byte
  CHECK(overlap(a, byte_range(at(0xfc0), 0x41)));     // ends on its first byte
  CHECK(overlap(a, byte_range(at(0x1010), 8)));       // inside
  CHECK(overlap(a, byte_range(at(0x800), 0x1000)));   // around
  CHECK_FALSE(overlap(a, byte_range(at(0x1040), 8)));  // adjacent after
  CHECK_FALSE(overlap(a, byte_range(at(0xfc0), 0x40)));  // adjacent before
}

TEST_CASE("byte ranges: an empty range overlaps nothing, wherever it points") {
  const ByteRange a = byte_range(at(0x1000), 0x40);
  for (uintptr_t p : {uintptr_t{0}, uintptr_t{0x1000}, uintptr_t{0x1020}, uintptr_t{0x103f}, UINTPTR_MAX}) {
    CAPTURE(p);
    CHECK_FALSE(overlap(a, byte_range(at(p), 0)));
    CHECK_FALSE(overlap(byte_range(at(p), 0), byte_range(at(p), 0)));
  }
  CHECK_FALSE(overlap(byte_range(at(0x1020), 0), byte_range(at(0), int64_t{1} << 62)));  // NULL-based too
}

TEST_CASE("byte ranges: a range running past 2^64 overlaps every non-empty range") {
  const ByteRange wrapping = byte_range(at(UINTPTR_MAX - 7), 16);  // would end at 2^64 + 8
  CHECK(overlap(wrapping, byte_range(at(0), 4)));                    // the bytes it wraps onto
  CHECK(overlap(wrapping, byte_range(at(UINTPTR_MAX - 3), 1)));      // its own real bytes
  CHECK(overlap(wrapping, byte_range(at(0x7f0000001000), 64)));      // anywhere (it cannot exist)
  CHECK(overlap(wrapping, byte_range(at(UINTPTR_MAX), 1)));          // the top byte, wrapping too
  CHECK_FALSE(overlap(wrapping, byte_range(at(0x1000), 0)));         // but never an empty one
  // A range ending exactly at 2^64 holds the top byte.
  CHECK(overlap(byte_range(at(UINTPTR_MAX - 15), 16), byte_range(at(UINTPTR_MAX - 1), 2)));
}

TEST_CASE("byte ranges: alignment to the element size") {
  using shapejit::rt::is_aligned;
  CHECK(is_aligned(at(0x1000), 8));
  CHECK(is_aligned(at(0x1004), 4));
  CHECK_FALSE(is_aligned(at(0x1004), 8));
  CHECK_FALSE(is_aligned(at(0x1001), 4));
  CHECK(is_aligned(at(0x1001), 1));
  CHECK(is_aligned(at(0x1002), 2));
}
