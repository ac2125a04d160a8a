// The byte ranges of caller buffers and the two rules validation applies to them, shared by the
// embedding-bag and linear-group validators: a buffer is aligned to its element size, and an
// output shares no byte with an input or another output.
#pragma once

#include <cstdint>
#include <string>

namespace shapejit::rt {

/// The bytes [begin, end) of one buffer; begin == end for a buffer the call does not touch.
struct ByteRange {
  uintptr_t begin, end;
};

/// [data, data + bytes) for a byte count already checked to be >= 0. A buffer that would run
/// past 2^64 (no real one does) becomes the whole address space, so that an overlap with it
/// cannot go unseen: every non-empty range of real addresses ends below 2^64 - 1.
inline ByteRange byte_range(const void* data, int64_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  uintptr_t end = 0;
  if (__builtin_add_overflow(begin, static_cast<uintptr_t>(bytes), &end)) [[unlikely]]
    return {0, UINTPTR_MAX};
  return {begin, end};
}

/// True when two non-empty ranges share a byte: each starts before the other ends.
inline bool nonempty_byte_ranges_overlap(const ByteRange& a, const ByteRange& b) {
  return a.begin < b.end && b.begin < a.end;
}

/// True when a and b share a byte; an empty range shares none.
inline bool byte_ranges_overlap(const ByteRange& a, const ByteRange& b) {
  return nonempty_byte_ranges_overlap(a, b) && a.begin < a.end && b.begin < b.end;
}

/// True when `data` is a multiple of `alignment` (a power of two).
inline bool is_aligned(const void* data, int64_t alignment) {
  return (reinterpret_cast<uintptr_t>(data) & static_cast<uintptr_t>(alignment - 1)) == 0;
}

/// An address as the messages print it: 0x-prefixed lowercase hex.
std::string hex_address(uintptr_t address);

/// "<name> = 0x... is not aligned to <alignment> bytes, the size of its <element> elements (...)".
std::string misaligned_message(const std::string& name, const void* data, int64_t alignment, const char* element);

/// "<name> [0x..., 0x...) (<bytes> bytes)": a buffer as overlap messages name it.
std::string describe_buffer(const std::string& name, const void* data, int64_t bytes);

}  // namespace shapejit::rt
