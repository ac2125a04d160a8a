// Rowwise prepack and unpack in the C ABI and the C++ API. Both reach runtime/embag/rowwise.cpp, the
// C++ API through the C argument struct, so one set of rules applies to both; the C++ API
// allocates its result only after the arguments passed them.
#include <string>
#include <vector>

#include "runtime/engine/c_enum.hpp"
#include "runtime/engine/last_error.hpp"
#include "runtime/embag/rowwise.hpp"
#include "shapejit/shapejit.hpp"

extern "C" {

int64_t shapejit_rowwise_row_bytes(shapejit_dtype qtype, int64_t dim) {
  int64_t bytes = -1;
  shapejit::rt::guarded([&] {
    bytes = shapejit::rt::rowwise_row_bytes_checked("rowwise_row_bytes", shapejit::rt::c_enum_value(qtype), dim);
  });
  return bytes;
}

shapejit_status shapejit_rowwise_prepack(const shapejit_rowwise_prepack_args* args, void* dst) {
  return shapejit::rt::guarded([&] {
    if (!args) throw shapejit::Error(shapejit::Status::kInvalidArgument, "rowwise_prepack: args must not be null");
    shapejit::rt::run_rowwise_prepack(*args, shapejit::rt::plan_rowwise_prepack(*args), dst);
  });
}

shapejit_status shapejit_rowwise_unpack(shapejit_dtype qtype, const void* src, int64_t rows, int64_t dim,
                                        int64_t row_bytes, float* dst) {
  return shapejit::rt::guarded([&] {
    const int64_t q = shapejit::rt::c_enum_value(qtype);
    shapejit::rt::run_rowwise_unpack(q, src, rows, dim, row_bytes,
                                     shapejit::rt::plan_rowwise_unpack(q, src, rows, dim, row_bytes), dst);
  });
}

}  // extern "C"

namespace shapejit {

int64_t rowwise_row_bytes(DType qtype, int64_t dim) {
  return rt::rowwise_row_bytes_checked("rowwise_row_bytes", static_cast<int>(qtype), dim);
}

std::vector<uint8_t> rowwise_prepack(DType qtype, const void* src, DType src_dtype, int64_t rows, int64_t dim,
                                     int64_t src_row_stride, const RowwisePrepackOptions& options) {
  shapejit_rowwise_prepack_args a{};
  rt::set_c_enum(a.qtype, qtype);
  a.src = src;
  rt::set_c_enum(a.src_dtype, src_dtype);
  a.rows = rows;
  a.dim = dim;
  a.src_row_stride = src_row_stride == 0 ? dim : src_row_stride;
  a.optimized_qparams = options.optimized_qparams;
  a.nbins = options.nbins;
  a.ratio = options.ratio;
  const rt::PrepackPlan plan = rt::plan_rowwise_prepack(a);
  std::vector<uint8_t> out(static_cast<size_t>(plan.dst_bytes));
  rt::run_rowwise_prepack(a, plan, out.data());
  return out;
}

std::vector<float> rowwise_unpack(DType qtype, const void* packed, int64_t rows, int64_t dim, int64_t row_bytes) {
  const int64_t q = static_cast<int>(qtype);
  if (row_bytes == 0 && dim >= 0 && (qtype == DType::kQ8 || qtype == DType::kQ4 || qtype == DType::kQ2))
    row_bytes = rt::rowwise_row_bytes_checked("rowwise_unpack", q, dim);
  const rt::UnpackPlan plan = rt::plan_rowwise_unpack(q, packed, rows, dim, row_bytes);
  std::vector<float> out(static_cast<size_t>(plan.dst_bytes / 4));
  rt::run_rowwise_unpack(q, packed, rows, dim, row_bytes, plan, out.data());
  return out;
}

}  // namespace shapejit
