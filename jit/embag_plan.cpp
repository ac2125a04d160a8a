// Planning shared by the embedding-bag emitters; see embag_plan.hpp.
#include "jit/embag_plan.hpp"

namespace shapejit::jit {

namespace {

constexpr int64_t kMaxStaticBlocks = 3;  // more blocks than this run in a loop

}  // namespace

std::optional<std::string> embag_key_unsupported_reason(const EmbagKey& key) {
  if (key.dim == 0)
    return "the generic kernel (dim 0) is not generated; the runtime's C++ fallback serves it";
  if (key.dim < 0 || key.dim > kMaxGeneratedEmbagDim)
    return "dim " + std::to_string(key.dim) + " is outside [1, " +
           std::to_string(kMaxGeneratedEmbagDim) + "]";
  if (key.table != DType::kF32) return "only f32 tables are generated so far";
  if (key.weighted && key.mode != Mode::kSum) return "per_sample_weights require mode sum";
  if (key.prefetch < 0 || key.prefetch > (1 << 20))
    return "prefetch distance " + std::to_string(key.prefetch) + " is outside [0, 2^20]";
  if ((key.index != DType::kI32 && key.index != DType::kI64) ||
      (key.offset != DType::kI32 && key.offset != DType::kI64))
    return "index and offset types must be i32 or i64";
  return std::nullopt;
}

// Up to kMaxStaticBlocks equal-sized blocks (every row loop does about the same work per
// index); wider rows get a full first block (it writes offset2bag and counts), a run-time loop
// of identical full blocks and a last block holding the rest and the tail.
std::vector<EmbagBlock> split_embag_blocks(int64_t num_vecs, int64_t vecs_per_block) {
  const int64_t num_blocks = (num_vecs + vecs_per_block - 1) / vecs_per_block;
  std::vector<EmbagBlock> blocks;
  if (num_blocks > kMaxStaticBlocks) {
    const int64_t n = vecs_per_block, middle = (num_vecs - 1) / n - 1;  // >= 2 here
    blocks.push_back({0, n, 1});
    blocks.push_back({n, n, middle});
    blocks.push_back({(middle + 1) * n, num_vecs - (middle + 1) * n, 1});
    return blocks;
  }
  int64_t first = 0;
  for (int64_t b = 0; b < num_blocks; ++b) {
    const int64_t n = num_vecs / num_blocks + (b < num_vecs % num_blocks ? 1 : 0);
    blocks.push_back({first, n, 1});
    first += n;
  }
  return blocks;
}

}  // namespace shapejit::jit
