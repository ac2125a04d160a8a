// Instruction-set families a kernel can be generated for.
#pragma once

#include <optional>
#include <string_view>

namespace shapejit::jit {

/// Ordered from least to most capable within the x86 family; kNeon is the AArch64 family.
enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kNeon = 3 };

/// Lower-case name as used in kernel names, SHAPEJIT_ISA and jitdump (`avx512`).
constexpr std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kNeon: return "neon";
  }
  return "?";
}

/// Inverse of isa_name(); nullopt for an unknown name.
inline std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon})
    if (isa_name(isa) == name) return isa;
  return std::nullopt;
}

}  // namespace shapejit::jit
