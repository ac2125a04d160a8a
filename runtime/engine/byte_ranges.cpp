// Message text for the buffer rules of byte_ranges.hpp; only failing calls get here.
#include "runtime/engine/byte_ranges.hpp"

#include <cstdio>

namespace shapejit::rt {

std::string hex_address(uintptr_t address) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(address));
  return buf;
}

std::string misaligned_message(const std::string& name, const void* data, int64_t alignment, const char* element) {
  return name + " = " + hex_address(reinterpret_cast<uintptr_t>(data)) + " is not aligned to " +
         std::to_string(alignment) + " bytes, the size of its " + element +
         " elements (every buffer must be aligned to its element size)";
}

std::string describe_buffer(const std::string& name, const void* data, int64_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  return name + " [" + hex_address(begin) + ", " + hex_address(begin + static_cast<uintptr_t>(bytes)) + ") (" +
         std::to_string(bytes) + " bytes)";
}

}  // namespace shapejit::rt
