// Planning shared by the embedding-bag emitters; see embag_plan.hpp.
#include "jit/embag_plan.hpp"

#include <algorithm>

namespace shapejit::jit {

namespace {

constexpr int64_t kMaxStaticBlocks = 3;  // more blocks than this run in a loop

bool is_float_value_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// The dtype combinations quantized-tables-semantics.md defines, by table: float tables output
// and weight in their own dtype; Q8 takes f32 weights, Q4/Q2 f32 or f16; quantized tables
// output f32, f16 or bf16. Q4/Q2 rows hold whole bytes of codes (D even / a multiple of 4).

std::optional<std::string> dtype_unsupported_reason(const EmbagKey& key) {
  const DType t = key.table;
  if (!is_float_value_dtype(t) && !is_quantized_table(t)) return "unknown table dtype";
  if (is_quantized_table(t) ? !is_float_value_dtype(key.out) : key.out != t)
    return "output dtype not defined for this table dtype";
  if (key.weighted) {
    const bool ok = t == DType::kQ8 ? key.psw == DType::kF32
                    : is_quantized_table(t) ? key.psw == DType::kF32 || key.psw == DType::kF16
                                            : key.psw == t;
    if (!ok) return "per_sample_weights dtype not defined for this table dtype";
  }
  if (t == DType::kQ4 && key.dim % 2 != 0) return "4-bit rows need an even dim";
  if (t == DType::kQ2 && key.dim % 4 != 0) return "2-bit rows need a dim divisible by 4";
  return std::nullopt;
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

int64_t embag_col_bytes(DType table, int64_t cols) {
  switch (table) {
    case DType::kF16:
    case DType::kBF16: return cols * 2;
    case DType::kQ8: return cols;
    case DType::kQ4: return (cols + 1) / 2;
    case DType::kQ2: return (cols + 3) / 4;
    default: return cols * 4;
  }
}

int64_t embag_row_trailer_bytes(DType table) {
  switch (table) {
    case DType::kQ8: return 8;
    case DType::kQ4:
    case DType::kQ2: return 4;
    default: return 0;
  }
}

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
