// Planning shared by the embedding-bag emitters; see embag_plan.hpp.
#include "jit/embag_plan.hpp"

#include <algorithm>

namespace shapejit::jit {

namespace {

constexpr int64_t kMaxStaticBlocks = 3;  // more blocks than this run in a loop

// Why a key breaks the kernels' dtype rule (dtype_traits.hpp), in the planner's words.
std::optional<std::string> dtype_unsupported_reason(const EmbagKey& key) {
  const int64_t t = int64_t(key.table);
  switch (kernel_dtype_rule(t, key.dim, int64_t(key.out), key.weighted, int64_t(key.psw))) {
    case DtypeRule::kOk: return std::nullopt;
    case DtypeRule::kUnknownTable: return "unknown table dtype";
    case DtypeRule::kOutput: return "output dtype not defined for this table dtype";
    case DtypeRule::kWeights: return "per_sample_weights dtype not defined for this table dtype";
    case DtypeRule::kRowBytes: {
      const DtypeTraits& d = dtype_traits(key.table);
      const int64_t n = d.codes_per_byte();
      return std::to_string(d.bits) + "-bit rows need " +
             (n == 2 ? std::string("an even dim") : "a dim divisible by " + std::to_string(n));
    }
  }
  return "unknown dtype rule";
}

}  // namespace

std::optional<std::string> embag_key_unsupported_reason(const EmbagKey& key) {
  if (key.dim == 0)
    return "the generic kernel (dim 0) is not generated; the runtime's C++ fallback serves it";
  if (key.dim < 0 || key.dim > kMaxGeneratedEmbagDim)
    return "dim " + std::to_string(key.dim) + " is outside [1, " +
           std::to_string(kMaxGeneratedEmbagDim) + "]";
  if (const auto why = dtype_unsupported_reason(key)) return why;
  if (key.weighted && key.mode != Mode::kSum) return "per_sample_weights require mode sum";
  if (key.prefetch < 0 || key.prefetch > (1 << 20))
    return "prefetch distance " + std::to_string(key.prefetch) + " is outside [0, 2^20]";
  if (key.prefetch_head && !embag_prefetch_head_defined(key))
    return "prefetching the head of a row is defined for f32 tables with a prefetch distance";
  if (key.out_stride != 0 && (key.out_stride <= key.dim || key.out_stride > kMaxGeneratedEmbagDim))
    return "output row stride " + std::to_string(key.out_stride) + " is outside (dim, " +
           std::to_string(kMaxGeneratedEmbagDim) + "] (0 names dense rows)";
  if ((key.index != DType::kI32 && key.index != DType::kI64) ||
      (key.offset != DType::kI32 && key.offset != DType::kI64))
    return "index and offset types must be i32 or i64";
  return std::nullopt;
}

bool embag_prefetch_head_defined(const EmbagKey& key) {
  return key.prefetch > 0 && key.table == DType::kF32;
}

int64_t embag_col_bytes(DType table, int64_t cols) { return dtype_traits(table).col_bytes(cols); }

int64_t embag_row_trailer_bytes(DType table) { return dtype_traits(table).trailer_bytes(); }

// Measured on the AVX2 EPYC host (f32 sum, 4096-row tables, 256 and 1024 bags x 32, kernel alone,
// against prefetching every line of the row at the runtime's distance): the rest of a small
// row's lines arrive in time without software prefetch, and prefetching them cost time.
// Quarter / half of the lines: D=32 and 64 (1 of 2 or 4 lines) +8 % and +16-19 %, D=48 +20 %,
// D=96 (2 lines) +13-15 %, 3 lines +8-10 %; half: D=128 +8-11 % (a quarter +5 %; cold 1e6-row
// table +13 %, a quarter +16 %), D=160 and 192 (2 blocks of 5-6 lines) +10 % and +3 %, D=256
// -1..+3 % (a quarter -3.5 %), D=512 (on an L3-sized table) -10..-14 %: wide rows keep all.
int64_t embag_prefetch_head_bytes(int64_t row_bytes, int64_t block_bytes) {
  constexpr int64_t kLine = kCacheLineBytes, kQuarterRowLines = 6, kHalfRowLines = 12;
  const int64_t row_lines = (row_bytes + kLine - 1) / kLine, block_lines = (block_bytes + kLine - 1) / kLine;
  if (row_lines > kHalfRowLines) return block_bytes;
  const int64_t share = row_lines <= kQuarterRowLines ? 4 : 2;
  return std::min(block_bytes, (block_lines + share - 1) / share * kLine);
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

bool embag_pairs_bags(const EmbagKey& key, int64_t num_vecs, int64_t free_vecs) {
  if (key.mode == Mode::kMax || key.padding || key.pruned || key.prefetch != 0 || key.out_stride != 0) return false;
  return num_vecs >= 1 && num_vecs <= kMaxPairedBagVecs && 2 * num_vecs <= free_vecs;
}

}  // namespace shapejit::jit
