// The enum fields of the C ABI structs hold whatever int the caller stored there (a C caller may
// write -1, or 7). Loading such a value as the unscoped C enum, or converting an out-of-range
// integer to it, is undefined behaviour in C++ (UBSan's -fsanitize=enum aborts on it). So these
// fields are read and written only as their int: validation sees, and prints, the caller's value.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace shapejit::rt {

/// The int a C ABI enum field holds, as the caller wrote it (signed: -1 prints as -1).
template <class CEnum>
int64_t c_enum_value(const CEnum& field) {
  static_assert(std::is_enum_v<CEnum> && sizeof(CEnum) == sizeof(int32_t), "C ABI enums are int-sized");
  int32_t v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}

/// Stores a C++ API enum class value (any int) in a C ABI enum field without converting it to
/// the C enum type, so an out-of-range value reaches validation as the caller's int.
template <class CEnum, class ScopedEnum>
void set_c_enum(CEnum& field, ScopedEnum value) {
  static_assert(std::is_enum_v<CEnum> && sizeof(CEnum) == sizeof(int32_t), "C ABI enums are int-sized");
  static_assert(std::is_same_v<std::underlying_type_t<ScopedEnum>, int>, "C++ API enums are int-based");
  const int32_t v = static_cast<int32_t>(value);
  std::memcpy(&field, &v, sizeof v);
}

}  // namespace shapejit::rt
