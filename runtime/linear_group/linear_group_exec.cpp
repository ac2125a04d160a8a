// The driver: groups parts by input, cuts each group into units (a block of panels x a range of
// rows), and runs the units. Within a unit the loop is: per block of rows (the kernel's mr), per
// run of panels of one part, one kernel call; the row block stays in L1 across the whole panel
// block (all parts of the group), the panel block (sized for L2) across the row blocks.
#include "runtime/linear_group/linear_group_exec.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "jit/generated_code_observer.hpp"
#include "runtime/engine/engine_arena.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

using Io = shapejit_linear_group_io;  // one part's run arguments, as the caller passed them

constexpr int64_t kBlockBytes = int64_t(512) << 10;        // panel block with several row blocks: ~L2/2
constexpr int64_t kStreamBlockBytes = int64_t(2) << 20;    // one row block: weights used once
constexpr int kUnitsPerThread = 4;
constexpr int64_t kPanelMajorRows = 3;  // units of up to this many row blocks run panel by panel
constexpr int64_t kL1RowBlockBytes = int64_t(32) << 10;    // a row block larger than this streams from L2
constexpr int64_t kMaxInputCopyBytes = int64_t(64) << 20;

// A part resolved for this call.
struct PartCall {
  const PackedPart* part = nullptr;
  const Io* io = nullptr;
  const float* a = nullptr;  // X or its padded copy (qd8: its quantized u8 rows)
  int64_t lda = 0;           // bytes
  const float* xs = nullptr;    // qd8: per-row scales of the quantized rows
  const int32_t* xz = nullptr;  // qd8: their biased zero points
  int64_t tables = -1;       // kTable / kScatter: index of the row table in Scratch::tables
  int64_t col_table = -1;    // and of the column table
};

// A run of panels [j0, j1) of one part; all full panels, or only the edge panel.
struct Segment {
  int32_t part = 0;
  bool edge = false;
  int64_t j0 = 0, j1 = 0;
};

// A block of panels sized for L2: segments [seg_begin, seg_end) and their columns x K.
struct PanelBlock {
  int64_t seg_begin = 0, seg_end = 0;
  double cols_k = 0;
};

struct Unit {
  int64_t seg_begin = 0, seg_end = 0;  // into Scratch::segments
  int64_t r0 = 0, r1 = 0;              // rows
  int mr = 1;                          // row block
  double work = 0;
};

// Per calling thread, reused across calls so a small call allocates nothing.
struct Scratch {
  std::vector<PartCall> calls;
  std::vector<int32_t> order;     // parts sorted into input groups
  std::vector<char> grouped;
  std::vector<Segment> segments;
  std::vector<PanelBlock> blocks;
  std::vector<Unit> units;
  std::vector<int64_t> tables;
  std::vector<int64_t> copy_offsets;
  std::vector<std::pair<int32_t, int32_t>> groups;  // input groups: ranges of `order`
  std::vector<float> inputs;      // padded copies of inputs whose rows alias in L1
};

thread_local Scratch t_scratch;

// Columns of a kScatter tile: a whole number of panels of every ISA (nc <= 48).
constexpr int64_t kScatterTileCols = 192;

// Part i's call with its input: X itself, or (qd8) its quantized rows.
PartCall make_call(const PackedGroup& g, std::span<const Io> io, std::span<const QuantizedInput> quantized, size_t i) {
  PartCall c;
  c.part = &g.parts[i];
  c.io = &io[i];
  if (quantized.empty()) {
    c.a = io[i].x;
    c.lda = io[i].ldx * 4;
    return c;
  }
  const QuantizedInput& q = quantized[i];
  c.a = reinterpret_cast<const float*>(q.u);  // the kernels read `a` as bytes in the qd8 forms
  c.lda = q.ldu;
  c.xs = q.scale;
  c.xz = q.zero;
  return c;
}

bool same_input(const Io& a, const Io& b) {
  return a.x == b.x && a.m == b.m && a.ldx == b.ldx;
}

// Head-split element offsets: row r of the input goes to ((n H + h) L + l) Dh + d for column
// h Dh + d, which separates into a row part (n H L + l) Dh and a column part h L Dh + d.
int64_t head_row_elem(const PackedPart& p, const Io& io, int64_t r) {
  const int64_t dh = p.n / p.heads, seq = io.m / io.batch;
  const bool seq_first = p.layout == SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST;
  const int64_t l = seq_first ? r / io.batch : r % seq;
  const int64_t b = seq_first ? r % io.batch : r / seq;
  return (b * p.heads * seq + l) * dh;
}

int64_t head_col_elem(const PackedPart& p, const Io& io, int64_t c) {
  const int64_t dh = p.n / p.heads, seq = io.m / io.batch;
  return (c / dh) * seq * dh + c % dh;
}

void build_tables(PartCall& call, std::vector<int64_t>& tables, int64_t lanes) {
  const PackedPart& p = *call.part;
  const Io& io = *call.io;
  if (p.store == PartStore::kRowMajor) return;
  // kTable: byte offsets per row and per vector of columns; kScatter: element offsets per row
  // and per column.
  const int64_t unit = p.store == PartStore::kTable ? 4 : 1;
  call.tables = int64_t(tables.size());
  for (int64_t r = 0; r < io.m; ++r) tables.push_back(head_row_elem(p, io, r) * unit);
  call.col_table = int64_t(tables.size());
  const int64_t step = p.store == PartStore::kTable ? lanes : 1;
  for (int64_t c = 0; c < p.n; c += step) tables.push_back(head_col_elem(p, io, c) * unit);
}

// The padded stride: 64 bytes (mod 4096) past the row, so consecutive rows fall on different
// L1 sets.
int64_t padded_ld(int64_t k) { return (k + 15) / 16 * 16 + 16; }

// Rows of one row block that alias in L1 (a stride of a multiple of 1 KiB) and do not fit it
// thrash it while the weights stream past (decode at K = 4096 halves its bandwidth): such
// inputs are copied once per call with a padded stride.
bool wants_padded_copy(const Io& io, int64_t k, int mr) {
  const int64_t rows = std::min<int64_t>(io.m, mr);
  return rows > 1 && (io.ldx * 4) % 1024 == 0 && rows * k * 4 > kL1RowBlockBytes &&
         io.m * (k * 4 + 64) <= kMaxInputCopyBytes;
}

// One kernel call (or one tile through kScatter) for rows [r, r + rows) and one segment.
void run_segment(const unsigned char* panels, const PartCall& c, const Segment& s, int64_t r, int rows,
                 const std::vector<int64_t>& tables, int64_t lanes) {
  const PackedPart& p = *c.part;
  const Io& io = *c.io;
  jit::GemmKernelArgs args = jit::kBlankGemmArgs;
  args.a = reinterpret_cast<const float*>(reinterpret_cast<const unsigned char*>(c.a) + r * c.lda);
  args.lda = c.lda;
  if (c.xs) args.x_scale = c.xs + r, args.x_zero = c.xz + r;
  args.b = reinterpret_cast<const float*>(panels + p.offset + s.j0 * p.full_bytes);
  args.panels = s.j1 - s.j0;
  args.scale = p.scale;
  const int64_t col0 = s.j0 * p.nc;
  const jit::GemmKernelFn fn = s.edge ? p.edge[size_t(rows - 1)] : p.full[size_t(rows - 1)];
  switch (p.store) {
    case PartStore::kRowMajor:
      args.c = io.y + r * io.ldy + col0;
      args.ldc = io.ldy * 4;
      fn(&args);
      return;
    case PartStore::kTable:
      args.c = io.y;
      args.row_off = tables.data() + c.tables + r;
      args.col_off = tables.data() + c.col_table + col0 / lanes;
      fn(&args);
      return;
    case PartStore::kScatter: {
      // Through a tile on the stack, a few panels at a time (a panel's columns never depend on
      // its neighbours, so the bits are those of one call over the segment): nothing allocates
      // while outputs are being written.
      float tile[kMaxGemmMr * kScatterTileCols];
      const int64_t* row_el = tables.data() + c.tables;
      const int64_t step = s.edge ? 1 : std::max<int64_t>(1, kScatterTileCols / p.nc);
      for (int64_t j = s.j0; j < s.j1; j += step) {
        const int64_t count = std::min(step, s.j1 - j);
        const int64_t tile_cols = s.edge ? p.edge_cols : count * p.nc;
        args.b = reinterpret_cast<const float*>(panels + p.offset + j * p.full_bytes);
        args.panels = count;
        args.c = tile;
        args.ldc = tile_cols * 4;
        fn(&args);
        const int64_t* col_el = tables.data() + c.col_table + j * p.nc;
        for (int64_t i = 0; i < rows; ++i) {
          float* dst = io.y + row_el[r + i];
          const float* src = tile + i * tile_cols;
          for (int64_t q = 0; q < tile_cols; ++q) dst[col_el[q]] = src[q];
        }
      }
      return;
    }
  }
}

// run_small for a row-major part: run_segment's kRowMajor case with the fields that do not
// change between row blocks set once (in the tiny calls this bookkeeping costs as much as the
// kernels). The same kernels with the same arguments, so the same bits.
void run_small_row_major(const unsigned char* panels, const PartCall& call) {
  const PackedPart& p = *call.part;
  const Io& io = *call.io;
  jit::GemmKernelArgs full = jit::kBlankGemmArgs, edge = jit::kBlankGemmArgs;
  full.lda = edge.lda = call.lda;
  full.ldc = edge.ldc = io.ldy * 4;
  full.scale = edge.scale = p.scale;
  full.b = reinterpret_cast<const float*>(panels + p.offset);
  full.panels = p.full_panels;
  edge.b = reinterpret_cast<const float*>(panels + p.offset + p.full_panels * p.full_bytes);
  edge.panels = 1;
  const int64_t edge_col0 = p.full_panels * p.nc;
  for (int64_t r = 0; r < io.m; r += p.mr) {
    const int rows = int(std::min<int64_t>(p.mr, io.m - r));
    const float* a = reinterpret_cast<const float*>(reinterpret_cast<const unsigned char*>(call.a) + r * call.lda);
    float* c = io.y + r * io.ldy;
    if (call.xs) {
      full.x_scale = edge.x_scale = call.xs + r;
      full.x_zero = edge.x_zero = call.xz + r;
    }
    if (p.full_panels > 0) {
      full.a = a, full.c = c;
      p.full[size_t(rows - 1)](&full);
    }
    if (p.edge_cols > 0) {
      edge.a = a, edge.c = c + edge_col0;
      p.edge[size_t(rows - 1)](&edge);
    }
  }
}

// Small calls: part by part, row block by row block, all full panels in one call, then the
// edge panel. Same kernels and row blocks as the blocked path, so the same bits. The head-split
// parts' offset tables are all built before the first part writes, so a failed allocation
// leaves every output untouched.
void run_small(const PackedGroup& g, std::span<const Io> io, std::span<const QuantizedInput> quantized) {
  const int64_t lanes = jit::gemm_lanes(g.isa);
  Scratch* s = nullptr;  // the thread's scratch, touched only for head-split
  for (size_t i = 0; i < io.size(); ++i) {
    if (io[i].m == 0 || g.parts[i].store == PartStore::kRowMajor) continue;
    if (!s) {
      s = &t_scratch;
      s->tables.clear();
      s->calls.assign(io.size(), PartCall{});
    }
    PartCall& c = s->calls[i];
    c = make_call(g, io, quantized, i);
    build_tables(c, s->tables, lanes);
  }
  for (size_t i = 0; i < io.size(); ++i) {
    if (io[i].m == 0) continue;
    const PackedPart& p = g.parts[i];
    if (p.store == PartStore::kRowMajor) {
      run_small_row_major(g.panels.get(), make_call(g, io, quantized, i));
      continue;
    }
    const PartCall& c = s->calls[i];
    const Segment full{int32_t(i), false, 0, p.full_panels};
    const Segment edge{int32_t(i), true, p.full_panels, p.full_panels + 1};
    for (int64_t r = 0; r < io[i].m; r += p.mr) {
      const int rows = int(std::min<int64_t>(p.mr, io[i].m - r));
      if (p.full_panels > 0) run_segment(g.panels.get(), c, full, r, rows, s->tables, lanes);
      if (p.edge_cols > 0) run_segment(g.panels.get(), c, edge, r, rows, s->tables, lanes);
    }
  }
}

void run_unit(const PackedGroup& g, const Scratch& s, const Unit& u) {
  const int64_t lanes = jit::gemm_lanes(g.isa);
  if (u.r1 - u.r0 > u.mr && u.r1 - u.r0 <= kPanelMajorRows * u.mr) {
    // A few row blocks (decode with M just above mr): panel by panel, so the weights stream
    // from memory once and the later row blocks find each panel in cache.
    for (int64_t i = u.seg_begin; i < u.seg_end; ++i) {
      const Segment& seg = s.segments[size_t(i)];
      for (int64_t j = seg.j0; j < seg.j1; ++j)
        for (int64_t r = u.r0; r < u.r1; r += u.mr) {
          const int rows = int(std::min<int64_t>(u.mr, u.r1 - r));
          run_segment(g.panels.get(), s.calls[size_t(seg.part)], {seg.part, seg.edge, j, j + 1}, r, rows, s.tables,
                      lanes);
        }
    }
    return;
  }
  for (int64_t r = u.r0; r < u.r1; r += u.mr) {
    const int rows = int(std::min<int64_t>(u.mr, u.r1 - r));
    for (int64_t i = u.seg_begin; i < u.seg_end; ++i) {
      const Segment& seg = s.segments[size_t(i)];
      run_segment(g.panels.get(), s.calls[size_t(seg.part)], seg, r, rows, s.tables, lanes);
    }
  }
}

int group_mr(const Scratch& s, int32_t b, int32_t e) {
  int mr = kMaxGemmMr;
  for (int32_t i = b; i < e; ++i) mr = std::min(mr, s.calls[size_t(s.order[size_t(i)])].part->mr);
  return mr;
}

// Gives every part of an input group whose rows alias in L1 the group's padded copy.
void copy_aliasing_inputs(Scratch& s) {
  std::vector<int64_t>& offsets = s.copy_offsets;
  offsets.assign(s.groups.size(), -1);
  size_t total = 0;
  for (size_t gi = 0; gi < s.groups.size(); ++gi) {
    const auto [b, e] = s.groups[gi];
    int64_t k = 0;
    for (int32_t i = b; i < e; ++i) k = std::max(k, s.calls[size_t(s.order[size_t(i)])].part->k);
    const Io& io = *s.calls[size_t(s.order[size_t(b)])].io;
    if (!wants_padded_copy(io, k, group_mr(s, b, e))) continue;
    offsets[gi] = int64_t(total);
    total += size_t(io.m * padded_ld(k));
  }
  if (total == 0) return;
  if (s.inputs.size() < total) s.inputs.resize(total);
  for (size_t gi = 0; gi < s.groups.size(); ++gi) {
    if (offsets[gi] < 0) continue;
    const auto [b, e] = s.groups[gi];
    int64_t k = 0;
    for (int32_t i = b; i < e; ++i) k = std::max(k, s.calls[size_t(s.order[size_t(i)])].part->k);
    const Io& io = *s.calls[size_t(s.order[size_t(b)])].io;
    float* dst = s.inputs.data() + offsets[gi];
    const int64_t ld = padded_ld(k);
    for (int64_t r = 0; r < io.m; ++r) std::memcpy(dst + r * ld, io.x + r * io.ldx, size_t(k) * sizeof(float));
    for (int32_t i = b; i < e; ++i) {
      PartCall& c = s.calls[size_t(s.order[size_t(i)])];
      c.a = dst;
      c.lda = ld * 4;
    }
  }
}

// Cuts one input group (parts order[b, e)) into units: panel blocks of about `block` bytes
// (L2), each over `row_splits` ranges of whole row blocks. (Keeping a range of rows in L2
// across the panel blocks instead, with ranges of 256 KiB, measured 10 % slower at E = 1024.)
void add_group_units(Scratch& s, int32_t b, int32_t e, int64_t row_splits) {
  const PartCall& first = s.calls[size_t(s.order[size_t(b)])];
  const int64_t m = first.io->m;
  const int mr = group_mr(s, b, e);
  const int64_t row_blocks = (m + mr - 1) / mr;
  const int64_t block = row_blocks == 1 ? kStreamBlockBytes : kBlockBytes;
  row_splits = std::clamp<int64_t>(row_splits, 1, row_blocks);

  // Panel blocks first, then the units over them.
  std::vector<PanelBlock>& blocks = s.blocks;
  blocks.clear();
  int64_t seg_begin = int64_t(s.segments.size()), bytes = 0;
  double cols_k = 0;
  for (int32_t i = b; i < e; ++i) {
    const int32_t pi = s.order[size_t(i)];
    const PackedPart& p = *s.calls[size_t(pi)].part;
    for (int64_t j = 0; j < p.panels(); ++j) {
      const bool edge = j == p.full_panels;
      Segment* last = int64_t(s.segments.size()) > seg_begin ? &s.segments.back() : nullptr;
      if (!edge && last && last->part == pi && !last->edge && last->j1 == j)
        ++last->j1;  // extend the run of full panels
      else
        s.segments.push_back({pi, edge, j, j + 1});
      bytes += edge ? p.edge_bytes : p.full_bytes;
      cols_k += double(edge ? p.edge_cols : p.nc) * double(p.k);
      if (bytes >= block) {
        blocks.push_back({seg_begin, int64_t(s.segments.size()), cols_k});
        seg_begin = int64_t(s.segments.size()), bytes = 0, cols_k = 0;
      }
    }
  }
  if (int64_t(s.segments.size()) > seg_begin) blocks.push_back({seg_begin, int64_t(s.segments.size()), cols_k});

  for (const PanelBlock& blk : blocks)
    for (int64_t q = 0; q < row_splits; ++q) {
      const int64_t r0 = row_blocks * q / row_splits * mr;
      const int64_t r1 = std::min(m, row_blocks * (q + 1) / row_splits * mr);
      if (r1 > r0) s.units.push_back({blk.seg_begin, blk.seg_end, r0, r1, mr, double(r1 - r0) * blk.cols_k});
    }
}


// Resolves every part for this call into s.calls and sorts the parts with rows into input
// groups, in order of first appearance: parts with the same input become adjacent in s.order,
// and each group is a [begin, end) range of it.
void group_by_input(Scratch& s, const PackedGroup& g, std::span<const Io> io,
                    std::span<const QuantizedInput> quantized) {
  s.calls.clear(), s.order.clear(), s.segments.clear(), s.units.clear(), s.tables.clear();
  for (size_t i = 0; i < io.size(); ++i) {
    s.calls.push_back(make_call(g, io, quantized, i));
    if (io[i].m > 0) s.order.push_back(int32_t(i));
  }
  s.groups.clear();
  s.grouped.assign(io.size(), 0);
  const size_t live = s.order.size();
  for (size_t i = 0; i < live; ++i) {
    const int32_t first = s.order[i];
    if (s.grouped[size_t(first)]) continue;
    const int32_t begin = int32_t(s.order.size());
    for (size_t j = i; j < live; ++j) {
      const int32_t pj = s.order[j];
      if (s.grouped[size_t(pj)] || !same_input(io[size_t(first)], io[size_t(pj)])) continue;
      s.grouped[size_t(pj)] = 1;
      s.order.push_back(pj);
    }
    s.groups.push_back({begin, int32_t(s.order.size())});
  }
  for (auto& [b, e] : s.groups) b -= int32_t(live), e -= int32_t(live);
  s.order.erase(s.order.begin(), s.order.begin() + std::ptrdiff_t(live));
}

// The units of the call: first without splitting rows; when that gives too few for the
// threads, with the rows split.
void cut_units(Scratch& s, int threads) {
  auto build_units = [&](int64_t row_splits) {
    s.segments.clear(), s.units.clear();
    for (const auto& [b, e] : s.groups) add_group_units(s, b, e, row_splits);
  };
  build_units(1);
  const int64_t wanted = int64_t(threads) * kUnitsPerThread;
  if (threads > 1 && int64_t(s.units.size()) < wanted)
    build_units((wanted + int64_t(s.units.size()) - 1) / int64_t(std::max<size_t>(s.units.size(), 1)));
}
}  // namespace

void run_packed_group(const PackedGroup& g, std::span<const Io> io, const LinearExecOptions& options,
                      std::span<const QuantizedInput> quantized) {
  if (io.size() != g.parts.size() || (!quantized.empty() && quantized.size() != io.size()) ||
      quantized.empty() == linear_quantized_input(g.quant))
    throw Error(Status::kInternalError, "run_packed_group: " + std::to_string(io.size()) + " io entries and " +
                                            std::to_string(quantized.size()) + " quantized inputs for " +
                                            std::to_string(g.parts.size()) + " parts");
  for (const QuantizedInput& q : quantized)
    if (q.u && q.signed_codes != g.signed_input)
      throw Error(Status::kInternalError, "run_packed_group: the quantized inputs' codes are " +
                                              std::string(q.signed_codes ? "signed" : "biased") +
                                              ", the kernels read them " + (g.signed_input ? "signed" : "biased"));
  double flops = 0;
  for (size_t i = 0; i < io.size(); ++i)
    flops += 2.0 * double(io[i].m) * double(g.parts[i].n) * double(g.parts[i].k);
  // Test hook (jit/generated_code_observer.hpp): one atomic load per call when none is set.
  if (flops > 0) jit::notify_generated_code(jit::GeneratedCodeEvent::kRun, g.isa);
  if (flops < options.inline_flops) {
    run_small(g, io, quantized);
    return;
  }
  Scratch& s = t_scratch;
  group_by_input(s, g, io, quantized);
  for (int32_t pi : s.order) build_tables(s.calls[size_t(pi)], s.tables, jit::gemm_lanes(g.isa));
  if (quantized.empty()) copy_aliasing_inputs(s);  // quantized rows are already a dense copy
  const int threads = engine_threads();
  cut_units(s, threads);
  if (threads <= 1 || s.units.size() <= 1) {
    for (const Unit& u : s.units) run_unit(g, s, u);
    return;
  }
  // Largest first, so the last units to start are the small ones.
  std::stable_sort(s.units.begin(), s.units.end(), [](const Unit& a, const Unit& b) { return a.work > b.work; });
  // The run's last allocation: after it only oneTBB allocates, and EngineTasks finishes on this
  // thread whatever oneTBB fails to run, so once an output is written the run completes.
  EngineTasks tasks(s.units.size());
  tasks.run([&](size_t i) { run_unit(g, s, s.units[i]); });
}

}  // namespace shapejit::rt
