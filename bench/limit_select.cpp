// Maps an ISA to its limit loop after the engine's host rule (jit/host_features.hpp), and lists
// the ISAs the benchmark rows measure. Compiled with the ordinary flags.
#include "limit_select.hpp"

#include "jit/embag_plan.hpp"
#include "jit/host_features.hpp"
#include "runtime/embag/prefetch_policy.hpp"
#include "runtime/engine/isa_select.hpp"

namespace shapejit::bench {

namespace {

// The loop of `isa` among one kind's three (nullptr where this build has none), or nullptr with
// `why_not` when it is missing or the host does not run it.
template <class Fn>
Fn host_loop(jit::Isa isa, Fn avx512, Fn avx2, Fn neon, std::string& why_not) {
  Fn loop = nullptr;
#if defined(__x86_64__)
  if (isa == jit::Isa::kAvx512) loop = avx512;
  if (isa == jit::Isa::kAvx2) loop = avx2;
  (void)neon;
#elif defined(__aarch64__)
  if (isa == jit::Isa::kNeon) loop = neon;
  (void)avx512, (void)avx2;
#else
  (void)avx512, (void)avx2, (void)neon;
#endif
  if (!loop) {
    why_not = isa == jit::Isa::kScalar
                  ? "limit: there is no scalar limit loop (the engine runs scalar code here, "
                    "e.g. under SHAPEJIT_ISA=scalar; the ref rows are that code)"
                  : "limit: this build has no " + std::string(jit::isa_name(isa)) + " loop";
    return nullptr;
  }
  if (std::string why = jit::isa_unsupported_reason(jit::host_features(), isa); !why.empty()) {
    why_not = "limit: the " + std::string(jit::isa_name(isa)) + " loop cannot run here: " + why;
    return nullptr;
  }
  return loop;
}

}  // namespace

LimitLoop limit_loop(jit::Isa isa, std::string& why_not) {
  return host_loop<LimitLoop>(isa, limit_embedding_bag_avx512, limit_embedding_bag_avx2, limit_embedding_bag_neon,
                              why_not);
}

ByteLimitLoop byte_limit_loop(jit::Isa isa, std::string& why_not) {
  return host_loop<ByteLimitLoop>(isa, limit_byte_rows_avx512, limit_byte_rows_avx2, limit_byte_rows_neon, why_not);
}

int64_t limit_prefetch_bytes(const LimitArgs& args, int64_t block_bytes) {
  if (!args.prefetch_head || args.op == LimitOp::kMax) return block_bytes;
  return jit::embag_prefetch_head_bytes(args.dim * int64_t(sizeof(float)), block_bytes);
}

void set_limit_prefetch(LimitArgs& args, jit::Isa isa, int64_t num_rows) {
  const int64_t row_bytes = args.dim * int64_t(sizeof(float));
  const int64_t stride_bytes = args.row_stride * int64_t(sizeof(float));
  args.prefetch_distance = rt::uncached_prefetch_distance(isa, row_bytes, num_rows, stride_bytes);
  args.prefetch_head = rt::row_head_prefetch_pays(isa, num_rows, stride_bytes);
}

void set_byte_limit_prefetch(ByteLimitArgs& args, jit::Isa isa, int64_t num_rows) {
  args.prefetch_distance = rt::uncached_prefetch_distance(isa, args.row_bytes, num_rows, args.row_stride_bytes);
}

bool limit_dim_supported(int64_t dim) {
  return dim == 16 || dim == 32 || dim == 64 || dim == 128 || dim == 256 || dim == 512;
}

std::vector<jit::Isa> bench_isas() {
  const jit::Isa selected = rt::selected_isa();
  std::vector<jit::Isa> isas{selected};
  // Within the x86 family the enum is ordered by capability (jit/isa.hpp).
  if (selected == jit::Isa::kAvx512 && jit::host_runs(jit::Isa::kAvx2)) isas.push_back(jit::Isa::kAvx2);
  return isas;
}

}  // namespace shapejit::bench
