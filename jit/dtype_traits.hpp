// The one table of what the engine knows about each dtype (element bytes, quantized or not,
// bits, where a quantized row keeps its scale and bias, the default output dtype, which output
// and per-sample-weight dtypes a table allows) and the one dtype-combination rule that the
// runtime's validation and the emitters' planning both call (quantized-tables-semantics.md B1-B3).
//
// The scalar reference keeps its own copy of these facts (ref/table_rows.hpp) on purpose: it is
// the independent oracle the kernels and this table are tested against.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

/// A set of dtypes (bit v for the C value v).
class DtypeSet {
 public:
  constexpr DtypeSet() = default;
  constexpr DtypeSet(std::initializer_list<DType> ts) {
    for (DType t : ts) bits_ |= uint32_t{1} << int(t);
  }
  /// Whether the C value `t` (any int64, out-of-range values included) is in the set.
  constexpr bool contains(int64_t t) const { return t >= 0 && t < 32 && (bits_ >> t & 1u) != 0; }
  constexpr bool contains(DType t) const { return contains(int64_t(t)); }
  constexpr bool operator==(const DtypeSet&) const = default;

 private:
  uint32_t bits_ = 0;
};

/// Where a rowwise-quantized row keeps its scale and bias (after its codes, rule B1).
enum class ScaleBiasLayout {
  kNone,           ///< not quantized
  kF32AfterCodes,  ///< Q8: f32 scale, then f32 bias, right after the D code bytes
  kF16AfterCodes,  ///< Q4, Q2: f16 scale, then f16 bias, right after the ceil(D * bits / 8) code bytes
};

struct DtypeTraits {
  DType dtype;
  const char* name;       ///< the name error messages give it ("float32", "q8", ...)
  int64_t element_bytes;  ///< bytes of one element; quantized rows are counted (and strided) in bytes: 1
  int bits;               ///< bits of one element, or of one code of a quantized row
  bool table;             ///< may be an embedding table
  bool quantized;         ///< rowwise-quantized rows (codes + scale + bias)
  ScaleBiasLayout scale_bias;
  DType default_value;  ///< output and per_sample_weights dtype unless the caller picks another (tables)
  DtypeSet outputs;     ///< output dtypes a table of this dtype may produce (B3)
  DtypeSet weights;     ///< per_sample_weights dtypes a table of this dtype takes (B3)

  /// Codes in one byte of a quantized row (8 / bits); 1 otherwise. A row's D is a multiple of it.
  constexpr int64_t codes_per_byte() const { return quantized ? 8 / bits : 1; }
  /// Bytes of the scale and bias after a quantized row's codes; 0 otherwise.
  constexpr int64_t trailer_bytes() const {
    return scale_bias == ScaleBiasLayout::kF32AfterCodes ? 8 : scale_bias == ScaleBiasLayout::kF16AfterCodes ? 4 : 0;
  }
  /// Bytes of `cols` columns of a row (rounded up to whole bytes for packed codes).
  constexpr int64_t col_bytes(int64_t cols) const {
    return quantized ? (cols * bits + 7) / 8 : cols * element_bytes;
  }
};

inline constexpr DtypeSet kFloatDtypes{DType::kF32, DType::kF16, DType::kBF16};

inline constexpr std::array<DtypeTraits, 8> kDtypeTraits{{
    // dtype, name, element bytes, bits, table, quantized, scale/bias, default value dtype, outputs, weights
    {DType::kF32, "float32", 4, 32, true, false, ScaleBiasLayout::kNone, DType::kF32, {DType::kF32}, {DType::kF32}},
    {DType::kF16, "float16", 2, 16, true, false, ScaleBiasLayout::kNone, DType::kF16, {DType::kF16}, {DType::kF16}},
    {DType::kBF16, "bfloat16", 2, 16, true, false, ScaleBiasLayout::kNone, DType::kBF16, {DType::kBF16},
     {DType::kBF16}},
    {DType::kI32, "int32", 4, 32, false, false, ScaleBiasLayout::kNone, DType::kI32, {}, {}},
    {DType::kI64, "int64", 8, 64, false, false, ScaleBiasLayout::kNone, DType::kI64, {}, {}},
    {DType::kQ8, "q8", 1, 8, true, true, ScaleBiasLayout::kF32AfterCodes, DType::kF32, kFloatDtypes,
     {DType::kF32}},
    {DType::kQ4, "q4", 1, 4, true, true, ScaleBiasLayout::kF16AfterCodes, DType::kF32, kFloatDtypes,
     {DType::kF32, DType::kF16}},
    {DType::kQ2, "q2", 1, 2, true, true, ScaleBiasLayout::kF16AfterCodes, DType::kF32, kFloatDtypes,
     {DType::kF32, DType::kF16}},
}};

/// The place of the C value `t` in kDtypeTraits, or -1 for a value outside shapejit_dtype.
/// Constant evaluation goes through this index, never a null test of a pointer into the table:
/// GCC's -fsanitize=undefined instruments that test and then rejects it as not constant.
/// Every call looks dtypes up several times, so the search over the table runs once, at compile
/// time, into a map indexed by the C value (a linear search per lookup was ~85 instructions of a
/// 1-bag call through the C ABI).
inline constexpr int kDtypeValueBound = 16;  // C values are 0 .. kDtypeValueBound - 1
inline constexpr std::array<int8_t, kDtypeValueBound> kDtypeIndexOfValue = [] {
  std::array<int8_t, kDtypeValueBound> index{};
  for (int8_t& i : index) i = -1;
  for (size_t i = 0; i < kDtypeTraits.size(); ++i) index[size_t(kDtypeTraits[i].dtype)] = int8_t(i);
  return index;
}();
constexpr int dtype_index(int64_t t) {
  return t >= 0 && t < kDtypeValueBound ? kDtypeIndexOfValue[size_t(t)] : -1;
}

/// The traits of the C value `t`, or nullptr for a value outside shapejit_dtype.
constexpr const DtypeTraits* find_dtype_traits(int64_t t) {
  const int i = dtype_index(t);
  return i < 0 ? nullptr : &kDtypeTraits[size_t(i)];
}

// Every table's default output and weight dtype is one it allows.
constexpr bool dtype_defaults_allowed() {
  for (const DtypeTraits& d : kDtypeTraits)
    if (d.table && (!d.outputs.contains(d.default_value) || !d.weights.contains(d.default_value))) return false;
  return true;
}
static_assert(dtype_defaults_allowed(), "kDtypeTraits: a table's default value dtype must be among those it allows");

/// The traits of `t` (a valid DType).
constexpr const DtypeTraits& dtype_traits(DType t) {
  return kDtypeTraits[size_t(kDtypeIndexOfValue[size_t(t) % kDtypeValueBound])];  // t valid: no bound test
}

/// The element bytes of every dtype packed into one constant, 4 bits per C value, from the
/// table above: the buffer rules of every call need them for up to nine buffers, and a shift
/// of a constant has no load to wait for (two dependent loads through the table did).
inline constexpr uint64_t kElementBytesByValue = [] {
  uint64_t packed = 0;
  for (const DtypeTraits& d : kDtypeTraits) {
    if (int(d.dtype) >= 16 || d.element_bytes >= 16) throw "kElementBytesByValue: 4 bits per value, 16 values";
    packed |= uint64_t(d.element_bytes) << (4 * int(d.dtype));
  }
  return packed;
}();
/// dtype_traits(t).element_bytes of a valid `t`.
constexpr int64_t element_bytes(DType t) { return int64_t(kElementBytesByValue >> (4 * (unsigned(t) & 15u)) & 15u); }

/// True for the rowwise-quantized table dtypes (kQ8, kQ4, kQ2).
constexpr bool is_quantized_table(DType t) {
  const int i = dtype_index(int64_t(t));
  return i >= 0 && kDtypeTraits[size_t(i)].quantized;
}

/// The dtype of the output and of per_sample_weights unless the caller picks another
/// (shapejit_embedding_bag_ex_args): the table's for float tables, f32 for quantized ones.
constexpr DType default_value_dtype(DType table) { return dtype_traits(table).default_value; }

/// Bytes of a table row of `dim` columns: its elements, or a quantized row's packed codes and
/// its scale and bias. The caller bounds dim so that the product fits.
constexpr int64_t table_row_bytes(DType table, int64_t dim) {
  const DtypeTraits& d = dtype_traits(table);
  return d.col_bytes(dim) + d.trailer_bytes();
}

/// The first dtype rule (B1-B3) a combination breaks, in the order validation checks them.
enum class DtypeRule {
  kOk,
  kUnknownTable,    ///< the table's dtype is not a table dtype
  kRowBytes,        ///< a packed row's D does not fill whole bytes of codes
  kOutput,          ///< the output dtype is not one the table's allows
  kWeights,         ///< the per_sample_weights dtype is not one the table's allows
};

/// The table half of the rule: a known table dtype, and packed codes filling whole bytes.
constexpr DtypeRule table_dtype_rule(int64_t table, int64_t dim) {
  const int i = dtype_index(table);
  if (i < 0 || !kDtypeTraits[size_t(i)].table) return DtypeRule::kUnknownTable;
  if (dim % kDtypeTraits[size_t(i)].codes_per_byte() != 0) return DtypeRule::kRowBytes;
  return DtypeRule::kOk;
}

/// The value half, for a table that passed table_dtype_rule: the output dtype and (when there
/// are per-sample weights) their dtype are among those the table allows.
constexpr DtypeRule value_dtype_rule(DType table, int64_t out, bool weighted, int64_t psw) {
  const DtypeTraits& d = dtype_traits(table);
  if (!d.outputs.contains(out)) return DtypeRule::kOutput;
  if (weighted && !d.weights.contains(psw)) return DtypeRule::kWeights;
  return DtypeRule::kOk;
}

/// The whole combination rule: the first rule broken, or kOk.
constexpr DtypeRule dtype_combination_rule(int64_t table, int64_t dim, int64_t out, bool weighted, int64_t psw) {
  const DtypeRule t = table_dtype_rule(table, dim);
  return t != DtypeRule::kOk ? t : value_dtype_rule(DType(table), out, weighted, psw);
}

/// The kernels' rule: a key's dtypes are a call's (dtype_combination_rule), except that every
/// table's kernel also reads f32 per-sample weights, which the runtime makes of f16 ones
/// before the kernels run on x86 (runtime/embag/widen_weights.hpp).
constexpr DtypeRule kernel_dtype_rule(int64_t table, int64_t dim, int64_t out, bool weighted, int64_t psw) {
  return dtype_combination_rule(table, dim, out, weighted && psw != int64_t(DType::kF32), psw);
}

/// "float32, float16 or bfloat16": the names of a set's dtypes, in the table's order.
std::string dtype_set_text(DtypeSet set);

}  // namespace shapejit::jit
