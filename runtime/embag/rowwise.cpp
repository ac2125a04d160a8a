// Argument rules of rowwise prepack and unpack (docs/quantized-tables-semantics.md, §9 "Argument
// rules": formats, sizes, buffers, search options), then the per-row loops. The messages are
// shapejit's own: torch either has no such check or crashes.
#include "runtime/embag/rowwise.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ref/float16.hpp"
#include "ref/rowwise_quantize.hpp"
#include "runtime/engine/byte_ranges.hpp"
#include "runtime/engine/c_enum.hpp"
#include "runtime/engine/dtype_name.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

using ref::RowwiseBits;
using std::to_string;

constexpr const char* kPrepack = "rowwise_prepack";
constexpr const char* kUnpack = "rowwise_unpack";

[[noreturn]] void invalid(const char* caller, const std::string& message) {
  throw Error(Status::kInvalidArgument, std::string(caller) + ": " + message);
}

std::string float_text(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// The format of a quantized dtype; anything else is rejected.
RowwiseBits bits_of(const char* caller, int64_t qtype) {
  switch (qtype) {
    case SHAPEJIT_Q8: return RowwiseBits::k8;
    case SHAPEJIT_Q4: return RowwiseBits::k4;
    case SHAPEJIT_Q2: return RowwiseBits::k2;
  }
  invalid(caller, "qtype must be Q8 (" + to_string(SHAPEJIT_Q8) + "), Q4 (" + to_string(SHAPEJIT_Q4) + ") or Q2 (" +
                      to_string(SHAPEJIT_Q2) + "), but got " + dtype_name(qtype) + " (" + to_string(qtype) + ")");
}

void check_non_negative(const char* caller, const char* name, int64_t v) {
  if (v < 0) invalid(caller, std::string(name) + " must be >= 0, but got " + to_string(v));
}

// rows and dim of a table in `bits` format: non-negative, and D fills whole bytes of codes, as
// torch's nbit formats require (a lookup derives D from the byte width).
void check_table_shape(const char* caller, RowwiseBits bits, int64_t rows, int64_t dim) {
  check_non_negative(caller, "rows", rows);
  check_non_negative(caller, "dim", dim);
  const int64_t per = ref::codes_per_byte(bits);
  if (dim % per != 0)
    invalid(caller, "dim must be a multiple of " + to_string(per) + " for " + (per == 2 ? "Q4" : "Q2") + " (" +
                        to_string(per) + " codes per byte), but got " + to_string(dim));
}

// first + (count - 1) * stride + last elements of elem_bytes each, for count >= 1, or throws.
int64_t strided_bytes(const char* caller, const char* name, int64_t count, int64_t stride, int64_t last,
                      int64_t elem_bytes) {
  int64_t span = 0, total = 0;
  if (__builtin_mul_overflow(count - 1, stride, &span) || __builtin_add_overflow(span, last, &span) ||
      __builtin_mul_overflow(span, elem_bytes, &total))
    invalid(caller, std::string(name) + " spans " + to_string(count) + " rows " + to_string(stride) +
                        " apart, whose byte count overflows int64");
  return total;
}

void check_no_overlap(const char* caller, const char* in_name, const void* in, int64_t in_bytes,
                      const char* out_name, const void* out, int64_t out_bytes) {
  if (byte_ranges_overlap(byte_range(in, in_bytes), byte_range(out, out_bytes)))
    invalid(caller, describe_buffer(out_name, out, out_bytes) + " overlaps " + describe_buffer(in_name, in, in_bytes) +
                        " (the output may share no byte with the input)");
}

// The src row r as f32: the row itself, or its f16 values widened exactly into `scratch`.
const float* source_row(const shapejit_rowwise_prepack_args& a, bool f16, int64_t r, std::vector<float>& scratch) {
  if (!f16) return static_cast<const float*>(a.src) + r * a.src_row_stride;
  const uint16_t* h = static_cast<const uint16_t*>(a.src) + r * a.src_row_stride;
  for (int64_t j = 0; j < a.dim; ++j) scratch[size_t(j)] = ref::f16_to_f32(h[j]);
  return scratch.data();
}

void check_search_options(const char* caller, RowwiseBits bits, const shapejit_rowwise_prepack_args& a) {
  if (bits == RowwiseBits::k8)
    invalid(caller, "optimized_qparams applies to Q4 and Q2 only (the 8-bit prepack has no search), but qtype is Q8");
  if (a.nbins < 1 || a.nbins > INT32_MAX)
    invalid(caller, "nbins must be in [1, 2^31 - 1], but got " + to_string(a.nbins));
  if (!(a.ratio >= 0.0f && a.ratio <= 1.0f))
    invalid(caller, "ratio must be in [0, 1], but got " + float_text(a.ratio));
}

}  // namespace

int64_t rowwise_row_bytes_checked(const char* caller, int64_t qtype, int64_t dim) {
  const RowwiseBits bits = bits_of(caller, qtype);
  check_non_negative(caller, "dim", dim);
  if (dim > INT64_MAX - 8) invalid(caller, "dim " + to_string(dim) + " gives a row size that overflows int64");
  return ref::rowwise_row_bytes(bits, dim);
}

PrepackPlan plan_rowwise_prepack(const shapejit_rowwise_prepack_args& a) {
  const RowwiseBits bits = bits_of(kPrepack, c_enum_value(a.qtype));
  const int64_t src_dtype = c_enum_value(a.src_dtype);
  if (src_dtype != SHAPEJIT_F32 && src_dtype != SHAPEJIT_F16)
    invalid(kPrepack, std::string("src_dtype must be float32 or float16 (widened exactly), but got ") +
                          dtype_name(src_dtype) + " (" + to_string(src_dtype) + ")");
  check_table_shape(kPrepack, bits, a.rows, a.dim);
  if (a.src_row_stride < a.dim)
    invalid(kPrepack, "src_row_stride must be >= dim (" + to_string(a.dim) + "), but got " + to_string(a.src_row_stride));
  if (a.optimized_qparams) check_search_options(kPrepack, bits, a);

  PrepackPlan p{};
  p.f16 = src_dtype == SHAPEJIT_F16;
  const int64_t elem = p.f16 ? 2 : 4;
  p.row_bytes = rowwise_row_bytes_checked(kPrepack, c_enum_value(a.qtype), a.dim);
  if (__builtin_mul_overflow(a.rows, p.row_bytes, &p.dst_bytes))
    invalid(kPrepack, "dst holds " + to_string(a.rows) + " rows of " + to_string(p.row_bytes) +
                          " bytes, whose byte count overflows int64");
  const bool reads = a.rows > 0 && a.dim > 0;
  p.src_bytes = reads ? strided_bytes(kPrepack, "src", a.rows, a.src_row_stride, a.dim, elem) : 0;
  if (!a.src && reads)
    invalid(kPrepack, "src is null but has " + to_string(a.rows) + " rows of " + to_string(a.dim) + " values");
  if (reads && !is_aligned(a.src, elem))
    invalid(kPrepack, misaligned_message("src", a.src, elem, dtype_name(src_dtype)));
  return p;
}

void run_rowwise_prepack(const shapejit_rowwise_prepack_args& a, const PrepackPlan& p, void* dst) {
  if (!dst && p.dst_bytes > 0) invalid(kPrepack, "dst is null but must receive " + to_string(p.dst_bytes) + " bytes");
  check_no_overlap(kPrepack, "src", a.src, p.src_bytes, "dst", dst, p.dst_bytes);
  const RowwiseBits bits = bits_of(kPrepack, c_enum_value(a.qtype));
  std::vector<float> scratch(p.f16 ? size_t(a.dim) : 0);
  uint8_t* out = static_cast<uint8_t*>(dst);
  if (bits == RowwiseBits::k8) {
    for (int64_t r = 0; r < a.rows; ++r) ref::pack_row_8bit(source_row(a, p.f16, r, scratch), a.dim, out + r * p.row_bytes);
    return;
  }
  // Every row's range first: the search may reject a row, and then nothing is written.
  std::vector<ref::RowRange> ranges(size_t(a.rows));
  for (int64_t r = 0; r < a.rows; ++r) {
    const float* x = source_row(a, p.f16, r, scratch);
    if (!a.optimized_qparams) {
      ranges[size_t(r)] = ref::vector_min_max(x, a.dim);  // FBGEMM's, as torch 2.13's plain prepack
      continue;
    }
    const ref::OptimizedRange o = ref::optimized_range(x, a.dim, a.nbins, a.ratio, bits);
    if (!o.terminates)
      invalid(kPrepack, "row " + to_string(r) + " cannot be packed with optimized_qparams: torch's search never ends on it (" +
                            "moving the window's " + (o.stuck_end_is_min ? "min " : "max ") + float_text(o.stuck_value) +
                            " by the step " + float_text(o.step) + " leaves it unchanged, the step being below half a float ulp there); "
                            "pack without optimized_qparams, or with fewer nbins");
    ranges[size_t(r)] = o.range;
  }
  for (int64_t r = 0; r < a.rows; ++r)
    ref::pack_row_nbit(source_row(a, p.f16, r, scratch), a.dim, bits, ranges[size_t(r)], out + r * p.row_bytes);
}

UnpackPlan plan_rowwise_unpack(int64_t qtype, const void* src, int64_t rows, int64_t dim, int64_t row_bytes) {
  check_table_shape(kUnpack, bits_of(kUnpack, qtype), rows, dim);
  const int64_t packed = rowwise_row_bytes_checked(kUnpack, qtype, dim);
  if (row_bytes < packed)
    invalid(kUnpack, "row_bytes must be >= the packed row size " + to_string(packed) + " (dim " + to_string(dim) +
                         "), but got " + to_string(row_bytes));
  if (!src && rows > 0) invalid(kUnpack, "src is null but has " + to_string(rows) + " rows");
  UnpackPlan p{};
  p.src_bytes = rows > 0 ? strided_bytes(kUnpack, "src", rows, row_bytes, packed, 1) : 0;
  p.dst_bytes = rows > 0 ? strided_bytes(kUnpack, "dst", rows, dim, dim, 4) : 0;
  return p;
}

void run_rowwise_unpack(int64_t qtype, const void* src, int64_t rows, int64_t dim, int64_t row_bytes,
                        const UnpackPlan& p, float* dst) {
  if (!dst && p.dst_bytes > 0) invalid(kUnpack, "dst is null but must receive " + to_string(p.dst_bytes) + " bytes");
  if (p.dst_bytes > 0 && !is_aligned(dst, 4)) invalid(kUnpack, misaligned_message("dst", dst, 4, "float32"));
  check_no_overlap(kUnpack, "src", src, p.src_bytes, "dst", dst, p.dst_bytes);
  const RowwiseBits bits = bits_of(kUnpack, qtype);
  const uint8_t* in = static_cast<const uint8_t*>(src);
  for (int64_t r = 0; r < rows; ++r) ref::unpack_row(in + r * row_bytes, dim, bits, dst + r * dim);
}

}  // namespace shapejit::rt
