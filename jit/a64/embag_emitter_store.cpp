// A64EmbagEmitter, second part: the store step (outputs, max_indices, counts).
#include <algorithm>
#include <cstddef>

#include "jit/a64/embag_emitter.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {
a64::Vec vq(uint32_t id) { return a64::v(id); }
}  // namespace

#define SJ_ARG(field) offsetof(EmbagKernelArgs, field)

// Step: store --------------------------------------------------------------------------------------

void A64EmbagEmitter::emit_store(const Block& blk) {
  const a64::Vec div = vq(bcast_);
  if (key_.mode == Mode::kMean) {  // IEEE division by (float)max(count, 1)
    a_.cmp(count_, Imm(1));
    a_.csinc(scratch_, count_, a64::xzr, Imm(uint32_t(a64::CondCode::kGT)));  // count > 1 ? count : 1
    a_.scvtf(a64::s(bcast_), scratch_);
    a_.dup(div.s4(), div.s(0));
  }
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    const uint32_t acc = acc_[size_t(j)];
    if (key_.mode == Mode::kMean) a_.fdiv(vq(acc).s4(), vq(acc).s4(), div.s4());
    store_cols(acc, out_, vec_offset(v), vec_cols(v) * 4, scratch_);
  }
  if (key_.mode == Mode::kMax) emit_store_max_indices(blk);
}

// max_indices[bag][col] from the id registers: 4 x 32-bit lanes stored like the values, or
// 2 x 64-bit lanes per register (columns 0-1 in ids_lo_, 2-3 in ids_hi_).
void A64EmbagEmitter::emit_store_max_indices(const Block& blk) {
  // The element offset of out_ (bag * dim + the shifted block's column) locates the ids too.
  load_arg(scratch_, SJ_ARG(output));
  a_.sub(scratch_, out_, scratch_);
  if (wide_ids()) a_.add(scratch_, scratch_, scratch_);
  load_arg(rowp_, SJ_ARG(max_indices));
  a_.add(scratch_, scratch_, rowp_);
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    const int64_t col = (v - base_vec_) * kLanes, cols = vec_cols(v);
    if (!wide_ids()) {
      store_cols(ids_lo_[size_t(j)], scratch_, col * 4, cols * 4, rowp_);
      continue;
    }
    store_cols(ids_lo_[size_t(j)], scratch_, col * 8, std::min<int64_t>(cols, 2) * 8, rowp_);
    if (cols > 2) store_cols(ids_hi_[size_t(j)], scratch_, col * 8 + 16, (cols - 2) * 8, rowp_);
  }
}

// bag_size[bag] (mean, max) and max_indices[bag] (mean) hold the count.
void A64EmbagEmitter::emit_bag_counts() {
  if (!counts()) return;
  load_arg(scratch_, SJ_ARG(bag_size));
  store_int(count_, scratch_, bag_);
  if (key_.mode == Mode::kMean) {
    load_arg(scratch_, SJ_ARG(max_indices));
    store_int(count_, scratch_, bag_);
  }
}

}  // namespace shapejit::jit
