// The buffer rules of an embedding-bag call: alignment to the element size, and no output sharing
// a byte with an input or another output. Byte sizes come from the plan, so every table, output
// and weight dtype is measured in its own element size (quantized rows in bytes).
#include <array>
#include <string>

#include "ref/table_rows.hpp"
#include "runtime/byte_ranges.hpp"
#include "runtime/validate.hpp"
#include "runtime/validate_detail.hpp"

namespace shapejit::rt {
namespace validate_detail {
namespace {

using std::to_string;

// The nine buffers of a call, inputs first, in argument order.
enum BufferId : int {
  kWeight, kIndices, kOffsets, kPerSampleWeights, kMapping,  // inputs
  kOutput, kOffset2bag, kBagSize, kMaxIndices,                // outputs
  kNumBuffers,
};
constexpr const char* kBufferNames[kNumBuffers] = {"weight",   "indices",    "offsets",  "per_sample_weights",
                                                   "compressed_indices_mapping", "output", "offset2bag",
                                                   "bag_size", "max_indices"};

// A buffer as the buffer rules see it: where it starts, the bytes the call may touch (0 when
// it touches none: a zero-length buffer may be NULL, anywhere, and overlaps nothing), the
// alignment its address needs and the name of its elements.
struct Buffer {
  const void* data;
  int64_t bytes;
  int64_t alignment;
  const char* element;
  ByteRange range;
};
using CallBuffers = std::array<Buffer, kNumBuffers>;

int64_t element_bytes(DType t) {
  switch (t) {
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    default: return 1;  // quantized rows: bytes, read bytewise
  }
}

Buffer make_buffer(const void* data, int64_t elements, DType dtype) {
  const int64_t bytes = elements * element_bytes(dtype);
  return {data, bytes, element_bytes(dtype), dtype_name(int64_t(dtype)), byte_range(data, bytes)};
}

// For a plan whose sizes passed validation (so every byte count fits in int64). The table
// counts from its first row to the end of its last, the gaps between rows included: an output
// placed among the rows is rejected, which no real caller needs. With no column, nothing of
// the table is read (not even a quantized row's scale).
void set_inputs(CallBuffers& c, const EmbagCallPlan& p) {
  const shapejit_embedding_bag_args& a = p.args.call;
  const int64_t table = p.num_rows > 0 && p.dim > 0 ? (p.num_rows - 1) * p.row_stride_bytes + p.row_bytes : 0;
  c[kWeight] = make_buffer(a.weight, table, DType::kQ8);  // counted in bytes ...
  c[kWeight].alignment = ref::is_quantized_table(a.weight_dtype) ? 1 : element_bytes(p.table);  // ... aligned to its elements
  c[kWeight].element = dtype_name(a.weight_dtype);
  c[kIndices] = make_buffer(a.indices, a.num_indices, p.index);
  c[kOffsets] = make_buffer(a.offsets, a.num_offsets, p.offset);
  c[kPerSampleWeights] = make_buffer(a.per_sample_weights, p.weighted ? a.num_indices : 0, p.psw);
  c[kMapping] = make_buffer(p.mapping, p.pruned ? p.mapping_len : 0, DType::kI32);
}

void set_outputs(CallBuffers& c, const EmbagCallPlan& p, const void* output, const void* offset2bag,
                 const void* bag_size, const void* max_indices) {
  const shapejit_embedding_bag_shapes& s = p.shapes;
  c[kOutput] = make_buffer(output, s.output_rows * s.output_cols, p.out);
  c[kOffset2bag] = make_buffer(offset2bag, s.offset2bag_len, p.index_out);
  c[kBagSize] = make_buffer(bag_size, s.bag_size_len, p.index_out);
  c[kMaxIndices] = make_buffer(max_indices, s.max_indices_rows * s.max_indices_cols, p.index_out);
}

// Every buffer the call touches is aligned to its element size: the reference and the runtime
// load and store them as typed elements, which a misaligned address makes undefined behaviour.
void check_alignment(const CallBuffers& c, int first, int end) {
  for (int id = first; id < end; ++id) {
    const Buffer& b = c[size_t(id)];
    if (b.bytes != 0 && !is_aligned(b.data, b.alignment))
      invalid(misaligned_message(kBufferNames[id], b.data, b.alignment, b.element));
  }
}

// Does output `o` share a byte with buffer `other` (an input, or an output before it)?
bool overlap(const CallBuffers& c, int o, int other) {
  return byte_ranges_overlap(c[size_t(o)].range, c[size_t(other)].range);
}

[[noreturn, gnu::cold, gnu::noinline]] void report_first_overlap(const CallBuffers& c) {
  for (int o = kOutput; o < kNumBuffers; ++o)
    for (int other = 0; other < o; ++other)
      if (overlap(c, o, other))
        invalid(describe_buffer(kBufferNames[o], c[size_t(o)].data, c[size_t(o)].bytes) + " overlaps " +
                describe_buffer(kBufferNames[other], c[size_t(other)].data, c[size_t(other)].bytes) +
                (other < kOutput ? " (an output must not overlap an input)"
                                 : " (outputs must not overlap each other)"));
  throw Error(Status::kInternalError, "embedding_bag: an overlap was found but no overlapping pair");
}

// Outputs are written while inputs are still being read (a bag's results are stored before the
// next bag's offsets and indices are loaded), so a shared byte corrupts the results or, once an
// index is overwritten, sends the reads outside the table. Every output is tested against every
// input and every earlier output; only a call with an overlap walks them again, in argument
// order, to name the first.
void check_no_overlap(const CallBuffers& c) {
  bool any = false;
  for (int o = kOutput; o < kNumBuffers; ++o)
    for (int other = 0; other < o; ++other) any |= overlap(c, o, other);
  if (any) [[unlikely]]
    report_first_overlap(c);
}

}  // namespace

void check_input_alignment(const EmbagCallPlan& plan) {
  CallBuffers c;
  set_inputs(c, plan);
  check_alignment(c, 0, kOutput);
}

}  // namespace validate_detail

void validate_embedding_bag_outputs(const EmbagCallPlan& plan, const void* output, const void* offset2bag,
                                    const void* bag_size, const void* max_indices) {
  using namespace validate_detail;
  CallBuffers c;
  set_inputs(c, plan);
  set_outputs(c, plan, output, offset2bag, bag_size, max_indices);
  for (int id = kOutput; id < kNumBuffers; ++id) {
    const Buffer& b = c[size_t(id)];
    if (!b.data && b.bytes != 0)
      invalid(std::string(kBufferNames[id]) + " is null but must hold " + to_string(b.bytes / b.alignment) +
              " elements");
  }
  check_alignment(c, kOutput, kNumBuffers);
  check_no_overlap(c);
}

}  // namespace shapejit::rt
