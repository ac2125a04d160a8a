// ISA-independent planning shared by the embedding-bag emitters (jit/x86, jit/a64): which keys
// any generator accepts, and how a row's vectors are split into register-sized column blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "jit/embag_kernel.hpp"

namespace shapejit::jit {

/// A run of consecutive vectors of a row processed by one row loop. With repeat > 1 the block
/// runs `repeat` times in a run-time loop, each time `num_vecs` vectors further right (wide
/// rows keep their code size bounded).
struct EmbagBlock {
  int64_t first_vec = 0, num_vecs = 0, repeat = 1;
};

/// Why no generator emits `key` (dim, table type, mode, prefetch and index/offset rules), or
/// nullopt when they all may; the ISA and CodeHolder checks stay with each emitter.
std::optional<std::string> embag_key_unsupported_reason(const EmbagKey& key);

/// Whether a key may prefetch only the head of each row (EmbagKey::prefetch_head): f32 tables
/// and a prefetch distance, every mode (when it pays is the runtime's prefetch policy). The
/// other tables keep every line: f16 and bf16 lost 2-6 % at D = 128..256 on AVX2; quantized rows
/// are not measured (their scale and bias trail the row and are read first).
bool embag_prefetch_head_defined(const EmbagKey& key);

/// Bytes of `cols` columns of a row of `table` (or of an output row of that dtype): 4 (f32), 2
/// (f16, bf16), 1 (Q8), 1/2 (Q4) or 1/4 (Q2) per column, rounded up to whole bytes. Column
/// blocks start at multiples of the vector width, so block offsets are exact.
int64_t embag_col_bytes(DType table, int64_t cols);

/// Bytes after a row's columns that belong to it: the rowwise-quantized scale and bias (Q8: two
/// f32; Q4/Q2: two f16), at byte embag_col_bytes(table, D) of the row; 0 for float tables.
int64_t embag_row_trailer_bytes(DType table);

/// The cache line the prefetch rules count in (every x86 and Arm host the engine targets).
inline constexpr int64_t kCacheLineBytes = 64;

/// Bytes a kernel that prefetches only the head of each f32 row (EmbagKey::prefetch_head)
/// prefetches of a column block spanning `block_bytes` of a row of
/// `row_bytes`: the first quarter of the block's cache lines for rows of up to 6 lines (384
/// bytes), the first half for rows of up to 12 lines, at least one line, rounded up to whole
/// lines; the whole block for wider rows.
int64_t embag_prefetch_head_bytes(int64_t row_bytes, int64_t block_bytes);

/// Splits `num_vecs` vectors into blocks of at most `vecs_per_block`: up to three blocks of
/// near-equal size, else a full first block, a run-time loop of full blocks and a last block.
std::vector<EmbagBlock> split_embag_blocks(int64_t num_vecs, int64_t vecs_per_block);

/// Widest row (in vectors) that runs two bags in flight: up to here a row's dependent add (or
/// FMA) chain, 3-5 cycles per row, is longer than loading its vectors at 2 per cycle.
inline constexpr int64_t kMaxPairedBagVecs = 4;

/// Two bags in flight (EmbagSkeleton's pair loop): sum (weighted or not) and mean without
/// padding_idx or pruning, any table dtype, without software prefetch, with dense output rows
/// (a strided second bag's stores need displacements AArch64's store forms cannot encode),
/// when the row is one
/// column block of at most kMaxPairedBagVecs vectors whose accumulators for two bags fit
/// `free_vecs` registers. Each bag keeps its own accumulators and row order, so the results are
/// bitwise those of one bag at a time; the rule follows from the key and the back end's
/// register file, so kernel names do not show it.
/// Why not with prefetch (measured on the AVX2 EPYC host, 4096-row tables): each bag's stream
/// prefetching `prefetch` positions ahead of its own row lands, past the bag's end, in the
/// pair's other bag (rows already read) and never reaches the next pair's second bag: 0.78-0.97x
/// at D = 16..32; prefetching one pair ahead (row j of the next pair) measured 0.74-0.96x
/// there too. Without prefetch, pairs measured 1.0-1.05x on those tables and 1.1-1.7x on
/// L1-resident ones (D = 8..16). Re-measured with AVX2's prefetch after the row (kernel alone,
/// x limit): D=32 4096 rows 0.94 with pairs vs 1.02 without, D=16 1.01-1.05 vs 1.05-1.08; a
/// table that needs prefetch keeps the loads in flight already, which pairs would add. The
/// skeleton still handles both loop copies, should a host class measure otherwise.
/// Mean pairs too (the Zen 4 host, 1024-row tables, kernel alone): AVX2 D=8 +28 %, D=16 +18 %,
/// D=32 +5 %; AVX-512 D=8 +9 %, D=16 +15 %, D=32 even. Max keeps one bag at a time: its value
/// and id registers per bag leave no room on AVX2, and its row loop is not latency-bound.
bool embag_pairs_bags(const EmbagKey& key, int64_t num_vecs, int64_t free_vecs);

}  // namespace shapejit::jit
