// The ISA-neutral skeleton of every linear-group (GEMM) microkernel: the panel loop, the k loop
// (run-time loop, unrolled rest, partial-sum sets), the accumulator start (bias or zero), the
// epilogue order (combine sets, activation, scale) and the stores (kRowMajor / kTable
// addressing, tails), written once against a small set of primitives that each back end
// (jit/x86, jit/a64) supplies. The activations that call a vector math function are played from
// jit/gemm_activation.hpp's recipes, so their formulas exist once for every ISA.
#pragma once

#include <asmjit/core.h>

#include <cstdint>
#include <vector>

#include "jit/gemm_activation.hpp"
#include "jit/gemm_kernel.hpp"
#include "jit/kernel_emitter.hpp"

namespace shapejit::jit {

/// One step of the k loop: `width` consecutive k starting at `k`.
struct GemmKStep {
  int64_t k = 0;        ///< first k, relative to where the X rows and the panel pointer point now
  int64_t width = 1;    ///< k the step consumes: k_step_width(), or 1 for the rest of k
  int64_t index = 0;    ///< steps before it in the loop body or in the rest (rotates temporaries)
  int64_t set = 0;      ///< partial-sum set it accumulates into (index % sets())
  bool in_loop = false; ///< inside the run-time k loop (the body repeats; pointers move after it)
};

/// Where an FMA finds X[row, k] (back-end defined: a broadcast register, one lane of a register
/// holding several k, or a memory operand the FMA broadcasts itself).
struct GemmXOperand {
  uint32_t vec = 0;      ///< the register holding it (when !memory)
  int64_t lane = -1;     ///< its lane in `vec`, -1 when every lane holds it
  bool memory = false;   ///< the FMA reads it from X (row `row`, step k `k`)
  int64_t row = 0;
  int64_t k = 0;
};

/// The kernel skeleton. generate() emits: prologue, load_args, the panel loop, finish, epilogue,
/// data. Per panel: X row pointers; accumulators start (set 0 from the bias for kF32, the rest
/// from zero); the k loop; then the epilogue on set 0: add the other sets in order; for the
/// quantized forms dequantize() then add_bias(); the activation; the scale; the stores; then
/// the pointers move to the next panel.
///
/// Arithmetic order (fixed here, every ISA): each output is one chain of FMAs in ascending k
/// per set (k step i goes to set i % sets(); with key.k_split set s takes span s of K and the
/// last set the k past the spans), the sets added in ascending order after the loop; relu is
/// max(+0, x) keeping NaN; the recipes' operations each round on their own; the scale
/// multiplies last. So a result depends on the key only, never on the thread split.
///
/// How a form plugs in (GemmKey::quant; docs/quantized-linear-semantics.md):
///  - the k step: kF32 runs emit_f32_k_step (load_x, load_weight_row, broadcast_x, fma); any
///    other form calls quant_k_step, which the back end implements for its forms (int8 dot
///    products into int32 accumulators for qd8, code conversion then FMA for the weight-only
///    forms). k_step_width() is the back end's full step for the form, and what the full steps
///    leave comes in steps of k_rest_step_width() (1 by default; qd8 back ends take whole
///    groups, gemm_k_group). The loop covers reduction_k(): gemm_padded_k for the qd8 forms,
///    whose rows are padded, but K for the f32-input forms, whose X rows hold K floats (the
///    panel's codes past K are zero, so nothing is lost). weight_bytes() already follows each
///    form's panel layout, so the loop, the prefetch helper and the panel advance need nothing
///    new; how far the X rows move per k (f32: 4 bytes, qd8: 1) stays inside the back end's
///    k_loop_end and its step. prepare_quant_panel() runs at each panel's start (constants an
///    activation call of the previous panel clobbered).
///  - the accumulators start at zero (no bias) for these forms; the sets are combined with
///    add_vec before the pre-epilogue, so a form with int32 accumulators either keeps
///    plan_sets() at 1 or makes add_vec an integer add for it.
///  - the pre-epilogue: dequantize() turns the combined accumulators into f32 (qd8:
///    f32(acc) * f32(x_scale[r] * wscale[c]), each product rounded, no FMA; weight-only:
///    acc * wscale[c]), then add_bias() adds the panel's bias vector (gemm_panel_offsets().bias)
///    when key.bias (b_consumed() locates the panel's trailing vectors). Everything after it (activation, scale, stores, next panel) is shared
///    unchanged, and so is the frame: calls_out(), spill slots and the recipes.
class GemmSkeleton : protected KernelEmitter {
 public:
  /// Emits the whole kernel; throws shapejit::Error (kUnsupported / kInternalError).
  void generate();

 protected:
  using Label = asmjit::Label;

  GemmSkeleton(const GemmKey& key, asmjit::CodeHolder& code);
  virtual ~GemmSkeleton() = default;

  // --- Queries the back ends share ------------------------------------------------------------
  const GemmKey& key() const { return key_; }
  int64_t lanes() const { return key_.lanes(); }
  int64_t nv() const { return nv_; }
  int64_t mr() const { return key_.mr; }
  int64_t tail() const { return tail_; }  ///< valid lanes of the last vector (0 = full)
  bool is_tail(int64_t v) const { return v == nv_ - 1 && tail_ != 0; }
  int64_t sets() const { return sets_; }
  /// Output vectors of the tile (mr x nv): the spill slots of an activation call.
  int64_t tile_vectors() const { return key_.mr * nv_; }
  /// Bytes of the panel's first `k` k rows (the form's layout: f32 4 bytes per column, int8
  /// codes 1, int4 codes 1/2; k a multiple of the form's group).
  int64_t weight_bytes(int64_t k) const;
  /// The epilogue calls a vector math function (the tile then goes to a stack area).
  bool calls_out() const { return activation_calls_out(key_.act); }
  /// Accumulator of (set, row, vector); the back end hands them over with set_accumulators.
  uint32_t acc(int64_t set, int64_t row, int64_t v) const { return acc_[size_t((set * key_.mr + row) * nv_ + v)]; }
  void set_accumulators(std::vector<uint32_t> regs) { acc_ = std::move(regs); }
  /// Bytes the panel pointer has advanced within the current panel (by the k loop), for
  /// addressing the panel's trailing vectors in the epilogue.
  int64_t b_consumed() const { return b_consumed_; }
  /// Prefetches, `key.prefetch` bytes ahead, the cache lines a weight row at `b_off` (bytes from
  /// the panel pointer) starts; panels are 64-byte aligned. Back ends call it in load_weight_row
  /// where their schedule wants it.
  void emit_weight_prefetch(int64_t b_off);

  // --- Primitives: planning and frame ---------------------------------------------------------
  virtual asmjit::BaseEmitter& attach_assembler() = 0;
  virtual void check_isa() const = 0;                   ///< key ISA vs back end and CodeHolder arch
  virtual int64_t plan_sets() const { return 1; }       ///< partial sums per output (the k steps rotate)
  virtual int64_t k_step_width() const = 0;             ///< k one full step consumes
  virtual int64_t k_loop_steps() const = 0;             ///< full steps per loop iteration (a multiple of sets())
  /// k of a step after the full ones when `left` k remain (1 <= result <= left); 1 unless the
  /// form reads whole groups (qd8: 4 or 8 codes).
  virtual int64_t k_rest_step_width(int64_t left) const { (void)left; return 1; }
  virtual void plan_registers() = 0;                    ///< roles, then set_accumulators
  virtual void emit_prolog_frame() = 0;
  virtual void load_args() = 0;                         ///< panel pointer, panel count, output cursor, spill area
  virtual void finish() {}                              ///< before the epilogue (release the spill area)
  virtual void emit_data() {}                           ///< constants after the code

  // --- Primitives: panel and k loops ------------------------------------------------------------
  virtual int64_t panel_loop_alignment() const = 0;
  virtual void point_at_x_rows() = 0;                   ///< X row pointers from args.a and args.lda
  virtual void panel_loop_end(const Label& top) = 0;    ///< count a panel down, back to top while any left
  virtual void k_loop_begin(int64_t iterations) = 0;    ///< the loop counter
  /// After one iteration of `k` k: X rows and the panel pointer advance, count down, back to top.
  virtual void k_loop_end(int64_t k, const Label& top) = 0;

  // --- Primitives: accumulators and the f32 k step ----------------------------------------------
  virtual void zero_vec(uint32_t vec) = 0;
  /// dst = the panel's bias vector v (at `offset` bytes from the panel pointer); called for row 0
  /// first (v ascending) then the other rows, which may copy row 0's.
  virtual void load_bias(uint32_t dst, int64_t row, int64_t v, int64_t offset) = 0;
  virtual void load_x(const GemmKStep&) {}              ///< X values the step's broadcasts read
  virtual void load_weight_row(int64_t b_off) = 0;      ///< nv weight vectors of one k (+ prefetch)
  virtual void prefetch_weights(int64_t offset) = 0;    ///< prefetch the line at panel pointer + offset
  virtual GemmXOperand broadcast_x(const GemmKStep& s, int64_t row, int64_t kk) = 0;
  virtual void fma(uint32_t acc, int64_t v, const GemmXOperand& x) = 0;  ///< acc += weight v * x
  /// Quantized forms: per panel before the k loop (after the X row pointers), e.g. constants a
  /// previous panel's activation call clobbered. Nothing by default.
  virtual void prepare_quant_panel();
  /// Quantized forms: one k step (see the class comment); throws kUnsupported until provided.
  virtual void quant_k_step(const GemmKStep& s);

  // --- Primitives: epilogue ---------------------------------------------------------------------
  /// Vector registers free after the k loop (which = 0, 1), for relu's zero and the scale.
  virtual uint32_t free_vec(int which) const = 0;
  virtual void add_vec(uint32_t dst, uint32_t a, uint32_t b) = 0;   ///< dst = a + b
  virtual void max_with_zero(uint32_t acc, uint32_t zero) = 0;      ///< acc = max(+0, acc), NaN kept
  virtual void load_scale(uint32_t dst) = 0;                        ///< args.scale in (lane 0 of) dst
  virtual void mul_scale(uint32_t acc, uint32_t scale) = 0;         ///< acc *= scale
  /// Quantized forms: f32 values from the combined accumulators; throws kUnsupported until provided.
  virtual void dequantize();
  /// Quantized forms: acc += the panel's bias vector v; throws kUnsupported until provided.
  virtual void add_bias(uint32_t acc, int64_t v, int64_t offset);

  // --- Primitives: activation calls (recipes of jit/gemm_activation.hpp) -------------------------
  // kArg and kTmp are registers 0 and 1 on every back end (0 carries a vector function's
  // argument and result); a back end may use register 2 for constants.
  virtual void spill_vec(int64_t slot, uint32_t src) = 0;   ///< stack slot `slot` = src
  virtual void reload_vec(uint32_t dst, int64_t slot) = 0;  ///< dst = stack slot `slot`
  virtual void act_binary(ActOp::Kind kind, uint32_t dst, uint32_t a, uint32_t b) = 0;  ///< kMul, kAdd, kDiv
  virtual void act_const(ActOp::Kind kind, uint32_t dst, uint32_t a, float value) = 0;  ///< kMulConst, kAddConst
  virtual void act_neg(uint32_t dst, uint32_t a) = 0;
  virtual void call_math(VectorMathFn fn) = 0;

  // --- Primitives: stores -----------------------------------------------------------------------
  virtual void prepare_tail_store() {}                 ///< once per panel before a partial panel's stores
  virtual void point_at_output_rows() = 0;             ///< kRowMajor: Y row pointers from the cursor
  virtual void store_row_major(uint32_t src, int64_t row, int64_t v) = 0;  ///< tail-exact for the last v
  virtual void load_table_columns() = 0;               ///< kTable: c + col_off[v] per vector
  virtual void load_table_row(int64_t row) = 0;        ///< kTable: row_off[row]
  virtual void store_table(uint32_t src, int64_t v) = 0;
  /// Panel pointer += b_bytes, output cursor += cur_bytes.
  virtual void advance_panel(int64_t b_bytes, int64_t cur_bytes) = 0;

 private:
  void check_key() const;
  void plan();
  void plan_k_split();
  int64_t reduction_k() const;  // k the k loop covers
  // The steps, in emission order.
  void emit_panel_loop();
  void emit_init();
  void emit_k_loop();
  void emit_k_split_loop();
  void emit_k_rest(int64_t from, int64_t k, int64_t set);
  void emit_k_step(const GemmKStep& s);
  void emit_f32_k_step(const GemmKStep& s);
  void emit_combine_sets();
  void emit_pre_epilogue();
  void emit_activation();
  void emit_relu();
  void emit_vector_math_activation();
  void play_recipe(const ActivationRecipe& recipe, int64_t slot);
  void emit_scale();
  void emit_store();
  void emit_next_panel();
  template <typename Fn> void for_tile(Fn fn) const;  // fn(row, v) over set 0, row-major

  GemmKey key_;
  int64_t nv_, tail_;
  int64_t sets_ = 1;
  int64_t iterations_ = 0;   // run-time k loop iterations (0: all k unrolled)
  int64_t loop_k_ = 0;       // k per loop iteration (k_split: per span)
  int64_t span_steps_ = 0;   // k_split: steps of each span per loop iteration
  int64_t split_k_ = 0;      // k_split: k of each span
  int64_t b_consumed_ = 0;   // bytes the panel pointer has advanced within the panel
  std::vector<uint32_t> acc_;
  asmjit::BaseEmitter* e_ = nullptr;
};

}  // namespace shapejit::jit
