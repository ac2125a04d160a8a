// GemmSkeleton: see gemm_skeleton.hpp. Everything here is control flow and order; every
// instruction is a back-end primitive.
#include "jit/gemm_skeleton.hpp"

#include <string>

#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {

constexpr int64_t kMaxK = int64_t(1) << 22;  // (k + 1) rows of a panel stay addressable by disp32
constexpr int64_t kFullUnrollK = 32;         // K up to this is emitted without a loop
constexpr int kMaxKSplit = 8;                // weight streams of a k-split kernel

}  // namespace

GemmSkeleton::GemmSkeleton(const GemmKey& key, CodeHolder& code)
    : KernelEmitter(code, key.name()), key_(key), nv_(key.nv()), tail_(key.tail()) {}

void GemmSkeleton::generate() {
  e_ = &attach_assembler();
  attach(*e_);
  check_isa();
  check_key();
  plan();
  plan_registers();
  emit_prolog_frame();
  load_args();
  check("load_args");
  emit_panel_loop();
  finish();
  emit_epilog();
  emit_data();
  check("constants");
}

// Planning --------------------------------------------------------------------------------------

void GemmSkeleton::check_key() const {
  const std::string mr_limit = std::to_string(gemm_max_mr(key_.isa, int(nv_)));
  if (key_.k < 1 || key_.k > kMaxK)
    unsupported("k " + std::to_string(key_.k) + " is outside [1, " + std::to_string(kMaxK) + "]");
  if (key_.nc < 1 || nv_ > 4) unsupported("nc " + std::to_string(key_.nc) + " needs 1..4 vectors");
  if (key_.mr < 1 || key_.mr > gemm_max_mr(key_.isa, int(nv_)))
    unsupported("mr " + std::to_string(key_.mr) + " is outside [1, " + mr_limit + "] for " + std::to_string(nv_) +
                " vectors");
  if (key_.store == GemmStore::kTable && tail_ != 0)
    unsupported("table stores need whole vectors (nc a multiple of " + std::to_string(lanes()) + ")");
  if (key_.prefetch < 0 || key_.prefetch > (1 << 20)) unsupported("prefetch distance outside [0, 2^20]");
  if (key_.dot && !gemm_quantized_input(key_.quant))
    unsupported("the dot variant exists for the qd8 forms only (the others multiply in f32)");
  if (gemm_quantized_input(key_.quant) && key_.k > kGemmQd8MaxK)
    unsupported("k " + std::to_string(key_.k) + " exceeds " + std::to_string(kGemmQd8MaxK) +
                ", the largest K whose qd8 int32 accumulator is exact");
  if (key_.k_split < 1 || key_.k_split > kMaxKSplit)
    unsupported("k_split " + std::to_string(key_.k_split) + " is outside [1, " + std::to_string(kMaxKSplit) + "]");
  const int budget = gemm_accumulator_budget(key_.isa, int(nv_), key_.quant, key_.dot);
  if (key_.k_split > 1 && key_.k_split * key_.mr * nv_ > budget)
    unsupported("k_split " + std::to_string(key_.k_split) + " needs " + std::to_string(key_.k_split * key_.mr * nv_) +
                " accumulators (k_split x mr x vectors); the form has " + std::to_string(budget));
}

// Sets first (the loop body is a whole number of rotations), then the k loop: up to
// kFullUnrollK every k is unrolled, above it a run-time loop of k_loop_steps() full steps.
void GemmSkeleton::plan() {
  if (key_.k_split > 1) return plan_k_split();
  sets_ = plan_sets();
  const int64_t steps = k_loop_steps();
  if (sets_ < 1 || steps % sets_ != 0)
    throw Error(Status::kInternalError, kernel_name() + ": the k loop body is not a whole number of set rotations");
  loop_k_ = steps * k_step_width();
  const int64_t k = reduction_k();
  iterations_ = k <= kFullUnrollK ? 0 : k / loop_k_;
}

// k_split: set s sums span s, K's first split_k_ * k_split k in k_split equal spans, and the
// last set also the k past them; each loop iteration takes k_loop_steps() / k_split steps of
// every span (at least one), so the k_split weight streams are read side by side.
void GemmSkeleton::plan_k_split() {
  sets_ = key_.k_split;
  span_steps_ = std::max<int64_t>(1, k_loop_steps() / sets_);
  loop_k_ = span_steps_ * k_step_width();
  split_k_ = reduction_k() / (sets_ * loop_k_) * loop_k_;
  iterations_ = split_k_ / loop_k_;
  if (iterations_ < 1)
    unsupported("k_split " + std::to_string(sets_) + " needs k >= " + std::to_string(sets_ * loop_k_) +
                " (one loop step per span)");
}

// The qd8 forms run to gemm_padded_k (their rows are padded with zero codes); the others stop
// at K, since X holds K floats (f32-qc4w's padded k only has zero codes in the panel).
int64_t GemmSkeleton::reduction_k() const {
  return gemm_quantized_input(key_.quant) ? gemm_padded_k(key_) : key_.k;
}

int64_t GemmSkeleton::weight_bytes(int64_t k) const {
  const int64_t w = gemm_panel_width(key_);
  switch (key_.quant) {
    case GemmQuant::kF32: return k * w * 4;
    case GemmQuant::kQd8Qc8w:
    case GemmQuant::kF32Qc8w: return k * w;
    case GemmQuant::kQd8Qc4w:
    case GemmQuant::kF32Qc4w: return k * w / 2;
  }
  throw Error(Status::kInternalError, kernel_name() + ": unknown GemmQuant");
}

void GemmSkeleton::emit_weight_prefetch(int64_t b_off) {
  if (key_.prefetch <= 0) return;
  const int64_t pos = b_consumed_ + b_off;
  const int64_t row = weight_bytes(1);
  for (int64_t line = (pos + 63) / 64 * 64; line < pos + row; line += 64) prefetch_weights(line - b_consumed_ + key_.prefetch);
}

template <typename Fn>
void GemmSkeleton::for_tile(Fn fn) const {
  for (int64_t i = 0; i < key_.mr; ++i)
    for (int64_t j = 0; j < nv_; ++j) fn(i, j);
}

// Step: panel loop ------------------------------------------------------------------------------

void GemmSkeleton::emit_panel_loop() {
  Label top = e_->newLabel();
  e_->align(AlignMode::kCode, uint32_t(panel_loop_alignment()));
  e_->bind(top);
  point_at_x_rows();
  emit_init();
  emit_k_loop();
  emit_combine_sets();
  emit_pre_epilogue();
  emit_activation();
  emit_scale();
  emit_store();
  emit_next_panel();
  panel_loop_end(top);
  check("panel_loop");
}

// kF32: the first set starts from the bias (the panel's row after its k rows), the others from
// zero: one rounding fewer per element than adding the bias at the end. The quantized forms add
// it after dequantizing (emit_pre_epilogue).
void GemmSkeleton::emit_init() {
  if (key_.quant != GemmQuant::kF32) prepare_quant_panel();
  const bool bias = key_.bias && key_.quant == GemmQuant::kF32;
  const int64_t offset = gemm_panel_offsets(key_).bias;
  for (int64_t s = 0; s < sets_; ++s)
    for_tile([&](int64_t i, int64_t j) {
      if (s == 0 && bias) load_bias(acc(0, i, j), i, j, offset);
      else zero_vec(acc(s, i, j));
    });
}

// Step: k loop ----------------------------------------------------------------------------------

void GemmSkeleton::emit_k_loop() {
  b_consumed_ = 0;
  if (key_.k_split > 1) return emit_k_split_loop();
  if (iterations_ > 0) {
    Label top = e_->newLabel();
    k_loop_begin(iterations_);
    e_->align(AlignMode::kCode, 16);
    e_->bind(top);
    const int64_t width = k_step_width();
    for (int64_t s = 0; s < loop_k_ / width; ++s) emit_k_step({s * width, width, s, s % sets_, true});
    k_loop_end(loop_k_, top);
    b_consumed_ = weight_bytes(iterations_ * loop_k_);
  }
  emit_k_rest(0, reduction_k() - iterations_ * loop_k_, -1);
  check("k_loop");
}

// The pointers advance by one span's loop k per iteration, so span s of step t sits s spans
// ahead; after the loop the k past the spans continue the last set's chain.
void GemmSkeleton::emit_k_split_loop() {
  Label top = e_->newLabel();
  k_loop_begin(iterations_);
  e_->align(AlignMode::kCode, 16);
  e_->bind(top);
  const int64_t width = k_step_width();
  int64_t index = 0;
  for (int64_t t = 0; t < span_steps_; ++t)
    for (int64_t s = 0; s < sets_; ++s, ++index) emit_k_step({s * split_k_ + t * width, width, index, s, true});
  k_loop_end(loop_k_, top);
  b_consumed_ = weight_bytes(split_k_);
  emit_k_rest((sets_ - 1) * split_k_, reduction_k() - sets_ * split_k_, sets_ - 1);
  check("k_loop");
}

// The k the loop leaves (or all of a small K), `k` of them from `from`, unrolled: full steps,
// then the back end's rest steps (single k unless it says otherwise: the qd8 forms take whole
// 4-code groups). The loop body is a whole number of set rotations, so step r of the rest
// continues at set r % sets, unless `set` >= 0 names the one set they all go to.
void GemmSkeleton::emit_k_rest(int64_t from, int64_t k, int64_t set) {
  const int64_t width = k_step_width();
  const auto set_of = [&](int64_t index) { return set >= 0 ? set : index % sets_; };
  int64_t at = 0, index = 0;
  for (; at + width <= k; at += width, ++index) emit_k_step({from + at, width, index, set_of(index), false});
  while (at < k) {
    const int64_t w = k_rest_step_width(k - at);
    if (w < 1 || w > k - at) throw Error(Status::kInternalError, kernel_name() + ": a rest step outside the k left");
    emit_k_step({from + at, w, index, set_of(index), false});
    at += w, ++index;
  }
}

void GemmSkeleton::emit_k_step(const GemmKStep& s) {
  if (key_.quant == GemmQuant::kF32) emit_f32_k_step(s);
  else quant_k_step(s);
}

// Per k of the step: one weight row, then per X row its value times each weight vector.
void GemmSkeleton::emit_f32_k_step(const GemmKStep& s) {
  load_x(s);
  for (int64_t kk = 0; kk < s.width; ++kk) {
    load_weight_row(weight_bytes(s.k + kk));
    for (int64_t i = 0; i < key_.mr; ++i) {
      const GemmXOperand x = broadcast_x(s, i, kk);
      for (int64_t j = 0; j < nv_; ++j) fma(acc(s.set, i, j), j, x);
    }
  }
}

void GemmSkeleton::quant_k_step(const GemmKStep&) {
  unsupported("this back end has no k step for the quantized form");
}

// Step: epilogue --------------------------------------------------------------------------------

void GemmSkeleton::emit_combine_sets() {
  for (int64_t s = 1; s < sets_; ++s) for_tile([&](int64_t i, int64_t j) { add_vec(acc(0, i, j), acc(0, i, j), acc(s, i, j)); });
}

void GemmSkeleton::emit_pre_epilogue() {
  if (key_.quant == GemmQuant::kF32) return;
  dequantize();
  if (!key_.bias) return;
  const int64_t offset = gemm_panel_offsets(key_).bias;
  for_tile([&](int64_t i, int64_t j) { add_bias(acc(0, i, j), j, offset); });
}

void GemmSkeleton::prepare_quant_panel() {}

void GemmSkeleton::dequantize() { unsupported("this back end has no epilogue for the quantized form"); }

void GemmSkeleton::add_bias(uint32_t, int64_t, int64_t) {
  unsupported("this back end has no bias step for the quantized form");
}

void GemmSkeleton::emit_activation() {
  if (key_.act == Activation::kNone) return;
  if (key_.act == Activation::kRelu) emit_relu();
  else emit_vector_math_activation();
}

void GemmSkeleton::emit_relu() {
  const uint32_t zero = free_vec(0);
  zero_vec(zero);
  for_tile([&](int64_t i, int64_t j) { max_with_zero(acc(0, i, j), zero); });
}

// The calls clobber the vector registers, so the tile goes to the stack and each vector is
// transformed in kArg by the recipe, then the tile is reloaded.
void GemmSkeleton::emit_vector_math_activation() {
  const ActivationRecipe& recipe = activation_recipe(key_.act);
  const int64_t count = tile_vectors();
  for (int64_t v = 0; v < count; ++v) spill_vec(v, acc(0, v / nv_, v % nv_));
  for (int64_t v = 0; v < count; ++v) play_recipe(recipe, v);
  for (int64_t v = 0; v < count; ++v) reload_vec(acc(0, v / nv_, v % nv_), v);
  check("activation");
}

void GemmSkeleton::play_recipe(const ActivationRecipe& recipe, int64_t slot) {
  const auto reg = [](ActReg r) { return uint32_t(r); };
  reload_vec(reg(ActReg::kArg), slot);
  for (const ActOp& op : recipe.ops) {
    switch (op.kind) {
      case ActOp::Kind::kMul:
      case ActOp::Kind::kAdd:
      case ActOp::Kind::kDiv: act_binary(op.kind, reg(op.dst), reg(op.a), reg(op.b)); break;
      case ActOp::Kind::kMulConst:
      case ActOp::Kind::kAddConst: act_const(op.kind, reg(op.dst), reg(op.a), op.constant); break;
      case ActOp::Kind::kNeg: act_neg(reg(op.dst), reg(op.a)); break;
      case ActOp::Kind::kInput: reload_vec(reg(op.dst), slot); break;
      case ActOp::Kind::kCall: call_math(recipe.fn); break;
    }
  }
  spill_vec(slot, reg(ActReg::kArg));
}

void GemmSkeleton::emit_scale() {
  if (!key_.scale) return;
  const uint32_t s = free_vec(1);
  load_scale(s);
  for_tile([&](int64_t i, int64_t j) { mul_scale(acc(0, i, j), s); });
}

// Step: stores ----------------------------------------------------------------------------------

// kRowMajor: Y[r, c] through per-row pointers; kTable: at c + row_off[r] + col_off[vector], the
// column part once per panel, the row part once per row.
void GemmSkeleton::emit_store() {
  if (tail_ != 0) prepare_tail_store();
  if (key_.store == GemmStore::kTable) {
    load_table_columns();
    for (int64_t i = 0; i < key_.mr; ++i) {
      load_table_row(i);
      for (int64_t j = 0; j < nv_; ++j) store_table(acc(0, i, j), j);
    }
  } else {
    point_at_output_rows();
    for_tile([&](int64_t i, int64_t j) { store_row_major(acc(0, i, j), i, j); });
  }
  check("store");
}

void GemmSkeleton::emit_next_panel() {
  const int64_t cur_bytes = key_.store == GemmStore::kTable ? nv_ * 8 : int64_t(key_.nc) * 4;
  advance_panel(gemm_panel_bytes(key_) - b_consumed_, cur_bytes);
}

}  // namespace shapejit::jit
