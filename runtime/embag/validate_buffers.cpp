// The buffer rules of an embedding-bag call: alignment to the element size, and no output sharing
// a byte with an input or another output. Byte sizes come from the plan, so every table, output
// and weight dtype is measured in its own element size (quantized rows in bytes).
#include <algorithm>
#include <array>
#include <string>
#include <tuple>
#include <vector>

#include "jit/embag_kernel.hpp"
#include "runtime/engine/byte_ranges.hpp"
#include "runtime/embag/validate.hpp"
#include "runtime/embag/validate_detail.hpp"

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
// alignment its address needs and the dtype its elements are named by in messages.
struct Buffer {
  const void* data;
  int64_t bytes;
  int64_t alignment;
  DType element;
};
constexpr int kNumInputs = kOutput, kNumOutputs = kNumBuffers - kOutput;
static_assert(kNumInputs == std::tuple_size_v<decltype(EmbagCallPlan::input_ranges)>);

// Quantized rows are read bytewise (their traits count 1 byte per element).
using jit::element_bytes;

Buffer make_buffer(const void* data, int64_t elements, DType dtype) {
  return {data, elements * element_bytes(dtype), element_bytes(dtype), dtype};
}

// For a plan whose sizes passed validation (so every byte count fits in int64). The table
// counts from its first row to the end of its last, the gaps between rows included: an output
// placed among the rows is rejected, which no real caller needs. With no column, nothing of
// the table is read (not even a quantized row's scale). The table and the mapping are the
// form's (a prepared call checks them once), the other three the batch's.
inline Buffer input_buffer(const EmbagCallPlan& p, int id) {
  const shapejit_embedding_bag_args& a = p.args.call;
  switch (id) {
    case kWeight: {
      const int64_t table = p.num_rows > 0 && p.dim > 0 ? (p.num_rows - 1) * p.row_stride_bytes + p.row_bytes : 0;
      Buffer b = make_buffer(a.weight, table, DType::kQ8);  // counted in bytes ...
      b.alignment = jit::is_quantized_table(p.table) ? 1 : element_bytes(p.table);  // ... aligned to its elements
      b.element = p.table;
      return b;
    }
    case kIndices: return make_buffer(a.indices, a.num_indices, p.index);
    case kOffsets: return make_buffer(a.offsets, a.num_offsets, p.offset);
    case kPerSampleWeights: return make_buffer(a.per_sample_weights, p.weighted ? a.num_indices : 0, p.psw);
    default: return make_buffer(p.mapping, p.pruned ? p.mapping_len : 0, DType::kI32);
  }
}

std::array<Buffer, kNumInputs> input_buffers(const EmbagCallPlan& p) {
  std::array<Buffer, kNumInputs> in;
  for (int id = 0; id < kNumInputs; ++id) in[size_t(id)] = input_buffer(p, id);
  return in;
}

std::array<Buffer, kNumOutputs> output_buffers(const EmbagCallPlan& p, const void* output, const void* offset2bag,
                                               const void* bag_size, const void* max_indices) {
  const shapejit_embedding_bag_shapes& s = p.shapes;
  // A strided output spans from its first row's start to its last row's end (gaps included);
  // without rows or columns it holds nothing.
  const int64_t output_elements =
      s.output_rows == 0 || s.output_cols == 0 ? 0 : (s.output_rows - 1) * p.out_row_stride + s.output_cols;
  return {make_buffer(output, output_elements, p.out),
          make_buffer(offset2bag, s.offset2bag_len, p.index_out),
          make_buffer(bag_size, s.bag_size_len, p.index_out),
          make_buffer(max_indices, s.max_indices_rows * s.max_indices_cols, p.index_out)};
}

// Every buffer the call touches is aligned to its element size: the reference and the runtime
// load and store them as typed elements, which a misaligned address makes undefined behaviour.
void check_alignment(const Buffer& b, int id) {
  if (b.bytes != 0 && !is_aligned(b.data, b.alignment)) [[unlikely]]
    invalid_with([&] {
      return misaligned_message(kBufferNames[id], b.data, b.alignment, dtype_name(int64_t(b.element)));
    });
}

// A call whose outputs broke a rule: the rules again, in order (null, alignment, overlap in
// argument order), to name the first broken one.
[[noreturn, gnu::cold, gnu::noinline]] void report_output_rule(const EmbagCallPlan& p, const void* output,
                                                                const void* offset2bag, const void* bag_size,
                                                                const void* max_indices) {
  const std::array<Buffer, kNumInputs> inputs = input_buffers(p);
  const std::array<Buffer, kNumOutputs> outputs = output_buffers(p, output, offset2bag, bag_size, max_indices);
  for (int k = 0; k < kNumOutputs; ++k) {
    const Buffer& b = outputs[size_t(k)];
    if (!b.data && b.bytes != 0)
      invalid(std::string(kBufferNames[kOutput + k]) + " is null but must hold " + to_string(b.bytes / b.alignment) +
              " elements");
  }
  for (int k = 0; k < kNumOutputs; ++k) check_alignment(outputs[size_t(k)], kOutput + k);
  auto buffer = [&](int id) -> const Buffer& {
    return id < kOutput ? inputs[size_t(id)] : outputs[size_t(id - kOutput)];
  };
  auto range = [&](int id) { return byte_range(buffer(id).data, buffer(id).bytes); };
  for (int o = kOutput; o < kNumBuffers; ++o)
    for (int other = 0; other < o; ++other)
      if (byte_ranges_overlap(range(o), range(other)))
        invalid(describe_buffer(kBufferNames[o], buffer(o).data, buffer(o).bytes) + " overlaps " +
                describe_buffer(kBufferNames[other], buffer(other).data, buffer(other).bytes) +
                (other < kOutput ? " (an output must not overlap an input)"
                                 : " (outputs must not overlap each other)"));
  throw Error(Status::kInternalError, "embedding_bag: an output rule failed but none names a buffer");
}

// The range the overlap test compares: a buffer the call does not touch becomes the inverted
// range [2^64 - 1, 0), which no test below finds overlapping (its begin is never below another
// end, nor its end above another begin), so no pair needs an emptiness test of its own.
ByteRange overlap_range(const void* data, int64_t bytes) {
  return bytes == 0 ? ByteRange{UINTPTR_MAX, 0} : byte_range(data, bytes);
}

// Outputs are written while inputs are still being read (a bag's results are stored before the
// next bag's offsets and indices are loaded), so a shared byte corrupts the results or, once an
// index is overwritten, sends the reads outside the table. Every output is tested against every
// input and every earlier output: up to 26 branch-free pair tests on values held in registers. Only a
// call with an overlap walks them again, in argument order, to name the first. (A version with
// the four outputs in one AVX2 vector ran 74 fewer instructions a call, in the same time.)
bool any_overlap(const std::array<ByteRange, kNumInputs>& inputs, const std::array<ByteRange, kNumOutputs>& outputs) {
  bool any = false;
  for (int o = 0; o < kNumOutputs; ++o) {
    const ByteRange a = outputs[size_t(o)];
    if (a.end == 0) continue;  // untouched (inverted): overlaps nothing, a well-predicted skip
    for (const ByteRange& b : inputs) any |= (a.begin < b.end) & (b.begin < a.end);
    for (int k = 0; k < o; ++k) any |= (a.begin < outputs[size_t(k)].end) & (outputs[size_t(k)].begin < a.end);
  }
  return any;
}

}  // namespace

// Each rule reads only its own buffers' fields: the form's run on a call whose batch is not
// checked yet (a one-shot call checks its form first).
void check_input_buffer(EmbagCallPlan& plan, int id) {
  const Buffer b = input_buffer(plan, id);
  check_alignment(b, id);
  plan.input_ranges[size_t(id)] = overlap_range(b.data, b.bytes);
}

void check_form_input_buffers(EmbagCallPlan& plan) {
  check_input_buffer(plan, kWeight);
  check_input_buffer(plan, kMapping);
}

void check_batch_input_buffers(EmbagCallPlan& plan) {
  check_input_buffer(plan, kIndices);
  check_input_buffer(plan, kOffsets);
  check_input_buffer(plan, kPerSampleWeights);
}

// One buffer of a group's call, for the cross-call rule. An `output` also carries its rows'
// layout: rows of row_bytes, period bytes apart (period == row_bytes when dense).
struct GroupBuffer {
  ByteRange range;
  size_t call;
  int id;  // BufferId
  uintptr_t period = 0, row_bytes = 0;
};

// Two overlapping spans that are both strided outputs of one period share no byte when their
// rows interleave: seen from a's rows, b's start `d` bytes into a period (d = (b - a) mod P), so
// b's row bytes [d, d + row_b) miss a's [0, row_a) in every period exactly when row_a <= d and
// d + row_b <= P. (Calls writing column slices of one [B, sum of D] buffer.)
bool rows_interleave(const GroupBuffer& a, const GroupBuffer& b) {
  if (a.id != kOutput || b.id != kOutput || a.period != b.period || a.period == 0) return false;
  const uintptr_t d = (b.range.begin - a.range.begin) % a.period;  // b starts no earlier than a
  return a.row_bytes <= d && d + b.row_bytes <= a.period;
}

[[noreturn, gnu::cold, gnu::noinline]] void report_group_overlap(const GroupBuffer& output, const GroupBuffer& other) {
  const auto name = [](const GroupBuffer& b) {
    return describe_buffer("calls[" + to_string(b.call) + "]." + kBufferNames[b.id],
                           reinterpret_cast<const void*>(b.range.begin), int64_t(b.range.end - b.range.begin));
  };
  throw Error(Status::kInvalidArgument,
              "embedding_bags: " + name(output) + " overlaps " + name(other) +
                  (other.id < kOutput ? " (an output must not overlap an input of any call of the group)"
                                      : " (the outputs of the calls of a group must not overlap each other)"));
}

}  // namespace validate_detail

void validate_group_outputs(std::span<const EmbagCallPlan> plans, std::span<const EmbagOutputs> outputs) {
  using namespace validate_detail;
  std::vector<GroupBuffer> outs, ins;
  for (size_t c = 0; c < plans.size(); ++c) {
    const EmbagOutputs& o = outputs[c];
    const std::array<Buffer, kNumOutputs> out = output_buffers(plans[c], o.output, o.offset2bag, o.bag_size, o.max_indices);
    const uintptr_t elem = uintptr_t(element_bytes(plans[c].out));
    for (int k = 0; k < kNumOutputs; ++k) {
      if (out[size_t(k)].bytes == 0) continue;
      GroupBuffer b{byte_range(out[size_t(k)].data, out[size_t(k)].bytes), c, kOutput + k};
      if (k == 0) b.period = uintptr_t(plans[c].out_row_stride) * elem, b.row_bytes = uintptr_t(plans[c].dim) * elem;
      outs.push_back(b);
    }
    for (int k = 0; k < kNumInputs; ++k) {
      const ByteRange r = plans[c].input_ranges[size_t(k)];
      if (r.begin < r.end) ins.push_back({r, c, k});
    }
  }
  // Outputs sorted by start; each is checked against the earlier ones whose span it enters
  // (`open`, those not yet ended): spans may overlap only as interleaved strided rows, so with
  // dense outputs `open` holds at most one entry, and with T calls writing slices of one buffer
  // up to T (T^2 / 2 pair tests). Outputs of one call were checked against each other already.
  std::sort(outs.begin(), outs.end(), [](const GroupBuffer& a, const GroupBuffer& b) { return a.range.begin < b.range.begin; });
  std::vector<size_t> open;
  for (size_t k = 0; k < outs.size(); ++k) {
    std::erase_if(open, [&](size_t j) { return outs[j].range.end <= outs[k].range.begin; });
    for (size_t j : open)
      if (!rows_interleave(outs[j], outs[k])) report_group_overlap(outs[k], outs[j]);
    open.push_back(k);
  }
  // The outputs' spans merged into disjoint ranges, sorted: the first one ending after an input
  // starts is the only candidate to overlap it (an input among strided rows counts as overlapping).
  std::vector<ByteRange> merged;
  for (const GroupBuffer& o : outs) {
    if (!merged.empty() && o.range.begin < merged.back().end) merged.back().end = std::max(merged.back().end, o.range.end);
    else merged.push_back(o.range);
  }
  for (const GroupBuffer& in : ins) {
    const auto m = std::upper_bound(merged.begin(), merged.end(), in.range.begin,
                                    [](uintptr_t at, const ByteRange& r) { return at < r.end; });
    if (m == merged.end() || m->begin >= in.range.end) continue;
    for (const GroupBuffer& o : outs)  // the error path: name an output whose span it enters
      if (nonempty_byte_ranges_overlap(o.range, in.range)) report_group_overlap(o, in);
  }
}

void validate_embedding_bag_outputs(const EmbagCallPlan& plan, const void* output, const void* offset2bag,
                                    const void* bag_size, const void* max_indices) {
  using namespace validate_detail;
  // Every rule in one branch-free pass (a call's outputs pass them); only a call that broke one
  // walks them again, in order, for its message.
  const std::array<Buffer, kNumOutputs> out = output_buffers(plan, output, offset2bag, bag_size, max_indices);
  bool broken = false;
  std::array<ByteRange, kNumOutputs> ranges;
  for (int k = 0; k < kNumOutputs; ++k) {
    const Buffer& b = out[size_t(k)];
    broken |= (b.bytes != 0) & (!b.data | !is_aligned(b.data, b.alignment));
    ranges[size_t(k)] = overlap_range(b.data, b.bytes);
  }
  if (broken | any_overlap(plan.input_ranges, ranges)) [[unlikely]]
    report_output_rule(plan, output, offset2bag, bag_size, max_indices);
}

}  // namespace shapejit::rt
