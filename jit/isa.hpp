// Instruction-set families a kernel can be generated for, and the one table of what each is:
// its family, vector shape, register file, how it masks a partial vector and which generators
// take it. Selection, dispatch, packing, the emitters, jitdump, the benchmarks and the tests read
// this table rather than naming ISAs; what can only be said per ISA (how a host is detected,
// measured prefetch tuning, an emitter's instructions) stays with its owner.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace shapejit::jit {

/// Ordered from least to most capable within the x86 family; kNeon is the AArch64 family.
/// Values are indices of kIsaTraits and never change (SHAPEJIT_ISA pins and tests store them).
enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kNeon = 3 };

/// The CPU family whose code an ISA is; kPortable (scalar: plain C++) runs on every family.
enum class IsaFamily : int { kPortable = 0, kX86 = 1, kA64 = 2 };

/// How generated code handles a vector's unused lanes (a row's tail).
enum class TailMask : int {
  kNone = 0,        ///< no vectors (scalar)
  kOpmask = 1,      ///< AVX-512 k registers: masked loads and stores
  kVectorMask = 2,  ///< AVX2 vmaskmovps with a vector of lane masks
  kLanes = 3,       ///< NEON: partial vectors loaded and stored lane by lane
};

/// Everything the engine knows of an ISA outside its emitters.
struct IsaTraits {
  Isa isa;
  std::string_view name;     ///< lower case, as in kernel names, SHAPEJIT_ISA and jitdump (`avx512`)
  IsaFamily family;
  int preference;            ///< place among its family's candidates, 0 = tried first
  int lanes;                 ///< f32 lanes per vector register (1 for scalar)
  int vector_registers;      ///< vector registers a kernel may use
  TailMask tail;
  bool embag_generator;      ///< an embedding-bag emitter takes it (else the generic kernel runs)
  bool gemm_generator;       ///< a GEMM microkernel emitter takes it (else groups run the reference)
  int gemm_panel_vectors;    ///< vectors per full GEMM panel: the accumulators fill the registers
                             ///< (AVX-512: 3 zmm x 8 rows; AVX2: 2 ymm x 6 rows; NEON: 4 q x 5 rows)
  int gemm_stream_split;      ///< weight streams (GemmKey::k_split) of a streamed f32 part's
                             ///< kernels; 1 = one stream. AVX2: 4, measured on a Zen 1 host
                             ///< (decode 15.5 -> 11.5 ms); AVX-512: 1 until measured on an
                             ///< AVX-512 host (the emitter takes k_split); NEON: 1, its emitter
                             ///< has no k split

  /// Bytes of one vector register.
  constexpr int vector_bytes() const { return lanes * 4; }
};

/// The table, indexed by Isa's value.
inline constexpr std::array<IsaTraits, 4> kIsaTraits = {{
    {Isa::kScalar, "scalar", IsaFamily::kPortable, 99, 1, 0, TailMask::kNone, false, false, 0, 1},
    {Isa::kAvx2, "avx2", IsaFamily::kX86, 1, 8, 16, TailMask::kVectorMask, true, true, 2, 4},
    {Isa::kAvx512, "avx512", IsaFamily::kX86, 0, 16, 32, TailMask::kOpmask, true, true, 3, 1},
    {Isa::kNeon, "neon", IsaFamily::kA64, 0, 4, 32, TailMask::kLanes, true, true, 4, 1},
}};

static_assert(
    [] {
      for (size_t i = 0; i < kIsaTraits.size(); ++i)
        if (static_cast<size_t>(kIsaTraits[i].isa) != i) return false;
      return true;
    }(),
    "kIsaTraits is indexed by Isa's value");

/// True for a value of Isa that the table holds (a key read from elsewhere may hold any int).
constexpr bool known_isa(Isa isa) { return static_cast<size_t>(isa) < kIsaTraits.size(); }

/// The traits of a known `isa`.
constexpr const IsaTraits& isa_traits(Isa isa) { return kIsaTraits[static_cast<size_t>(isa)]; }

/// Lower-case name as used in kernel names, SHAPEJIT_ISA and jitdump (`avx512`).
constexpr std::string_view isa_name(Isa isa) { return known_isa(isa) ? isa_traits(isa).name : "?"; }

/// Inverse of isa_name(); nullopt for an unknown name.
constexpr std::optional<Isa> parse_isa(std::string_view name) {
  for (const IsaTraits& t : kIsaTraits)
    if (t.name == name) return t.isa;
  return std::nullopt;
}

/// The family this library was built for (CMake's SHAPEJIT_X86 / SHAPEJIT_A64): its generated
/// code runs on that family only.
#if defined(SHAPEJIT_HOST_X86)
inline constexpr IsaFamily kBuildFamily = IsaFamily::kX86;
#elif defined(SHAPEJIT_HOST_A64)
inline constexpr IsaFamily kBuildFamily = IsaFamily::kA64;
#else
inline constexpr IsaFamily kBuildFamily = IsaFamily::kPortable;
#endif

/// The ISAs of `family` best first, then scalar (which runs everywhere, and always last).
inline std::vector<Isa> isa_candidates(IsaFamily family) {
  std::vector<Isa> list;
  for (const IsaTraits& t : kIsaTraits)
    if (t.family == family && family != IsaFamily::kPortable) list.push_back(t.isa);
  for (size_t i = 1; i < list.size(); ++i)  // a handful of entries: insertion sort by preference
    for (size_t j = i; j > 0 && isa_traits(list[j]).preference < isa_traits(list[j - 1]).preference; --j)
      std::swap(list[j], list[j - 1]);
  list.push_back(Isa::kScalar);
  return list;
}

/// The ISAs with generated code (every one but scalar), families in table order, best first
/// within each: what jitdump offers under --isa and what the tests run per host.
inline std::vector<Isa> generated_isas() {
  std::vector<Isa> list;
  for (IsaFamily family : {IsaFamily::kX86, IsaFamily::kA64})
    for (Isa isa : isa_candidates(family))
      if (isa != Isa::kScalar) list.push_back(isa);
  return list;
}

}  // namespace shapejit::jit
