// The ISA traits table (jit/isa.hpp) that selection, dispatch, packing, the emitters, jitdump
// and the tests read: its rows must say what the emitters were written for.
#include <doctest/doctest.h>

#include <vector>

#include "jit/gemm_kernel.hpp"
#include "jit/isa.hpp"
#include "jit/x86/vec_traits.hpp"

namespace {

using shapejit::jit::Isa;
using shapejit::jit::IsaFamily;
using shapejit::jit::isa_traits;

}  // namespace

TEST_CASE("isa traits: candidates per family, best first, scalar last; the generated ISAs") {
  CHECK(shapejit::jit::isa_candidates(IsaFamily::kX86) == std::vector<Isa>{Isa::kAvx512, Isa::kAvx2, Isa::kScalar});
  CHECK(shapejit::jit::isa_candidates(IsaFamily::kA64) == std::vector<Isa>{Isa::kNeon, Isa::kScalar});
  CHECK(shapejit::jit::isa_candidates(IsaFamily::kPortable) == std::vector<Isa>{Isa::kScalar});
  CHECK(shapejit::jit::generated_isas() == std::vector<Isa>{Isa::kAvx512, Isa::kAvx2, Isa::kNeon});
  for (const shapejit::jit::IsaTraits& t : shapejit::jit::kIsaTraits) {
    CAPTURE(t.name);
    CHECK(shapejit::jit::parse_isa(t.name) == t.isa);
    CHECK(t.embag_generator == (t.isa != Isa::kScalar));
    CHECK(t.gemm_generator == (t.isa != Isa::kScalar));
  }
  CHECK_FALSE(shapejit::jit::parse_isa("sse").has_value());
  CHECK(shapejit::jit::isa_name(static_cast<Isa>(7)) == "?");
}

TEST_CASE("isa traits: vector shapes and register files the emitters were written for") {
  CHECK(shapejit::jit::gemm_lanes(Isa::kAvx512) == 16);
  CHECK(shapejit::jit::gemm_lanes(Isa::kAvx2) == 8);
  CHECK(shapejit::jit::gemm_lanes(Isa::kNeon) == 4);
  constexpr shapejit::jit::X86VecTraits zmm = shapejit::jit::X86VecTraits::of(Isa::kAvx512);
  constexpr shapejit::jit::X86VecTraits ymm = shapejit::jit::X86VecTraits::of(Isa::kAvx2);
  CHECK((zmm.avx512 && zmm.lanes == 16 && zmm.bytes == 64 && zmm.num_regs == 32));
  CHECK((!ymm.avx512 && ymm.lanes == 8 && ymm.bytes == 32 && ymm.num_regs == 16));
  CHECK(isa_traits(Isa::kNeon).vector_registers == 32);
  // A full panel's row block fills the registers: 8 rows of 3 zmm, 6 of 2 ymm, 5 of 4 q.
  CHECK(shapejit::jit::gemm_max_mr(Isa::kAvx512, isa_traits(Isa::kAvx512).gemm_panel_vectors) == 8);
  CHECK(shapejit::jit::gemm_max_mr(Isa::kAvx2, isa_traits(Isa::kAvx2).gemm_panel_vectors) == 6);
  CHECK(shapejit::jit::gemm_max_mr(Isa::kNeon, isa_traits(Isa::kNeon).gemm_panel_vectors) == 5);
  CHECK(shapejit::jit::gemm_max_mr(Isa::kScalar, 1) == 0);
}
