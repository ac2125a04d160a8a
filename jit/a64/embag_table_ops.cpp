// A64TableOps: see embag_table_ops.hpp for the conventions. Register plan per dtype (temps are
// t_[0..]; every operation may clobber all of them):
//   f32        t0 t1 (ldp pair)                 f16 / bf16  t0 (halves) t1 (low 4 widened)
//   Q8/Q4/Q2   t0 t1 (codes, nibbles, crumbs; then widened to 16 bit), t2 (4 codes as f32);
//              Q4 / Q2: masks 0x0F (and 0x03)
// plus the weight w_ (weighted), scale s_ and bias b_ (quantized), and the bf16 rounding
// constants (bf16 output, bf16 mean). Stores and mean_finish reuse the temps.
#include "jit/a64/embag_table_ops.hpp"

#include <algorithm>
#include <string>

#include "jit/embag_plan.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {

a64::Vec vq(uint32_t id) { return a64::v(id); }  // the whole 128-bit register
a64::Vec vreg(uint32_t id, int64_t bytes) {      // the scalar view of `bytes` (1, 2, 4, 8, 16)
  switch (bytes) {
    case 1: return a64::VecB(id);
    case 2: return a64::VecH(id);
    case 4: return a64::s(id);
    case 8: return a64::d(id);
    default: return a64::v(id);
  }
}
a64::Vec lane(uint32_t id, int64_t bytes, uint32_t index) {  // element `index` of size `bytes`
  switch (bytes) {
    case 1: return a64::v(id).b(index);
    case 2: return a64::v(id).h(index);
    case 4: return a64::v(id).s(index);
    default: return a64::v(id).d(index);
  }
}
int64_t floor_pow2(int64_t n) {
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}
[[noreturn]] void internal(const std::string& what) {
  throw Error(Status::kInternalError, "a64 table ops: " + what);
}

}  // namespace

A64TableOps::A64TableOps(const EmbagKey& key, a64::Assembler& a) : key_(key), a_(a) {}

bool A64TableOps::quantized() const { return is_quantized_table(key_.table); }

int A64TableOps::temp_count() const {
  int temps = quantized() ? 3 : 2;
  if (key_.out == DType::kBF16) temps = std::max(temps, 4);  // narrow_bf16's three + the output
  if (key_.mode == Mode::kMean) temps = std::max(temps, key_.table == DType::kBF16 ? 5 : 2);  // + divisor
  return temps;
}

bool A64TableOps::half_table() const { return key_.table == DType::kF16 || key_.table == DType::kBF16; }

bool A64TableOps::bf16_rounding() const {
  return key_.out == DType::kBF16 || (key_.mode == Mode::kMean && key_.table == DType::kBF16);
}

A64TableOps::Needs A64TableOps::needs() const {
  int vecs = temp_count();
  if (key_.weighted) vecs += 1;
  if (quantized()) vecs += 2;
  if (key_.table == DType::kQ4) vecs += 1;
  if (key_.table == DType::kQ2) vecs += 2;
  if (bf16_rounding()) vecs += 2;
  return {vecs, 1};
}

void A64TableOps::bind(std::span<const uint32_t> vecs, std::span<const uint32_t> gps) {
  const Needs n = needs();
  if (int(vecs.size()) != n.vecs || int(gps.size()) != n.gps) internal("bind: wrong register count");
  const size_t temps = size_t(temp_count());
  t_.assign(vecs.begin(), vecs.begin() + temps);
  size_t i = temps;
  if (key_.weighted) w_ = vecs[i++];
  if (quantized()) s_ = vecs[i++], b_ = vecs[i++];
  if (key_.table == DType::kQ4 || key_.table == DType::kQ2) mask_ = vecs[i++];
  if (key_.table == DType::kQ2) mask2_ = vecs[i++];
  if (bf16_rounding()) one_ = vecs[i++], half_ = vecs[i++];
  g_ = a64::x(gps[0]);
  bound_ = true;
}

void A64TableOps::emit_constants() {
  if (!bound_) internal("emit_constants before bind");
  if (key_.table == DType::kQ4 || key_.table == DType::kQ2) a_.movi(vq(mask_).b16(), 0x0F);
  if (key_.table == DType::kQ2) a_.movi(vq(mask2_).b16(), 0x03);
  if (bf16_rounding()) {
    a_.movi(vq(one_).s4(), 1);
    a_.movi(vq(half_).s4(), 0x7F, a64::msl(8));  // 0x7FFF per lane
  }
}

int64_t A64TableOps::col_offset(int64_t col) const { return embag_col_bytes(key_.table, col); }
int64_t A64TableOps::code_bytes(int64_t cols) const { return embag_col_bytes(key_.table, cols); }
int64_t A64TableOps::row_bytes() const { return code_bytes(key_.dim) + embag_row_trailer_bytes(key_.table); }
int64_t A64TableOps::group_cols() const { return quantized() ? 16 : 8; }

// Addressing ------------------------------------------------------------------------------------

// dst = base + offset (dst is the scratch, never base).
void A64TableOps::add_address(const a64::Gp& dst, const a64::Gp& base, int64_t offset) {
  const uint64_t magnitude = offset < 0 ? uint64_t(0) - uint64_t(offset) : uint64_t(offset);
  if (magnitude < 4096) {
    if (offset >= 0) a_.add(dst, base, Imm(magnitude));
    else a_.sub(dst, base, Imm(magnitude));
    return;
  }
  a_.mov(dst, Imm(magnitude));
  if (offset >= 0) a_.add(dst, base, dst);
  else a_.sub(dst, base, dst);
}

// base + offset for an access of `size` bytes: the scaled 12-bit or the unscaled 9-bit immediate
// form when one encodes it (asmjit picks ldur/stur for the latter), else through the scratch.
a64::Mem A64TableOps::mem(const a64::Gp& base, int64_t offset, int64_t size) {
  const bool scaled = offset >= 0 && offset % size == 0 && offset / size < 4096;
  const bool unscaled = offset >= -256 && offset < 256;
  if (scaled || unscaled) return a64::ptr(base, int32_t(offset));
  add_address(g_, base, offset);
  return a64::ptr(g_);
}

// n bytes: the largest power of two with one ldr (zeroing the rest of the vector), the rest in
// decreasing powers of two as lane loads, each aligned to its size within the vector.
void A64TableOps::load_bytes(uint32_t v, const a64::Gp& base, int64_t offset, int64_t n) {
  if (n < 1 || n > 16) internal("load_bytes of " + std::to_string(n) + " bytes");
  int64_t pos = floor_pow2(n);
  a_.ldr(vreg(v, pos), mem(base, offset, pos));
  if (pos == n) return;
  add_address(g_, base, offset + pos);
  while (pos < n) {
    const int64_t size = floor_pow2(n - pos);
    const a64::Vec el = lane(v, size, uint32_t(pos / size));
    if (pos + size < n) a_.ld1(el, a64::ptr_post(g_, int32_t(size)));
    else a_.ld1(el, a64::ptr(g_));
    pos += size;
  }
}

void A64TableOps::store_bytes(uint32_t v, const a64::Gp& base, int64_t offset, int64_t n) {
  if (n < 1 || n > 16) internal("store_bytes of " + std::to_string(n) + " bytes");
  int64_t pos = floor_pow2(n);
  a_.str(vreg(v, pos), mem(base, offset, pos));
  if (pos == n) return;
  add_address(g_, base, offset + pos);
  while (pos < n) {
    const int64_t size = floor_pow2(n - pos);
    const a64::Vec el = lane(v, size, uint32_t(pos / size));
    if (pos + size < n) a_.st1(el, a64::ptr_post(g_, int32_t(size)));
    else a_.st1(el, a64::ptr(g_));
    pos += size;
  }
}

// Per position / per row ------------------------------------------------------------------------

void A64TableOps::load_weight(const a64::Gp& psw, const a64::Gp& pos) {
  if (!key_.weighted) return;
  if (key_.psw == DType::kF32) {
    a_.ldr(a64::s(w_), a64::ptr(psw, pos, a64::lsl(2)));
    return;
  }
  a_.ldr(a64::VecH(w_), a64::ptr(psw, pos, a64::lsl(1)));
  if (key_.psw == DType::kF16) a_.fcvt(a64::s(w_), a64::VecH(w_));
  else a_.shll(vq(w_).s4(), vq(w_).h4(), 16);  // bf16: the upper half of an f32
}

// Sum / mean: s_ = f32(w * scale) in lane 0, b_ = f32(w * bias) in every lane (B4). Max: the
// dequantize step's scale and bias, the bias as f32(+0 + bias), the step from +0.0 that defines
// the dequantized value (-0.0 becomes +0.0).
void A64TableOps::row_setup(const a64::Gp& base, int64_t row_offset) {
  if (!quantized()) return;
  const int64_t trailer = row_offset + code_bytes(key_.dim);
  const bool max = key_.mode == Mode::kMax;
  const a64::Vec s = vq(s_), b = vq(b_);
  if (key_.table == DType::kQ8) {
    a_.ldr(a64::d(s_), mem(base, trailer, 8));  // lane 0 scale, lane 1 bias
  } else {
    a_.ldr(a64::s(s_), mem(base, trailer, 4));  // two f16
    a_.fcvtl(s.s4(), s.h4());
  }
  if (max) {
    a_.movi(vq(t_[0]).s4(), 0);
    a_.fadd(s.s2(), s.s2(), vq(t_[0]).s2());  // scale + 0 changes no product's sum; bias + 0 is the rule
  } else if (key_.weighted) {
    a_.fmul(s.s2(), s.s2(), vq(w_).s(0));
  }
  a_.dup(b.s4(), s.s(1));
}

// Loading columns as f32 ------------------------------------------------------------------------

// Q4: the low nibble of byte k is column 2k, the high one column 2k+1: interleaving the two
// halves (zip1) puts the codes in column order, one per byte (up to 16 from 8 bytes in t0).
void A64TableOps::unpack_nibbles() {
  const a64::Vec c = vq(t_[0]), lo = vq(t_[1]);
  a_.and_(lo.b8(), c.b8(), vq(mask_).b8());
  a_.ushr(c.b8(), c.b8(), 4);
  a_.zip1(c.b16(), lo.b16(), c.b16());
}

// Q2: nibbles first (each holds two consecutive crumbs, low first), then the same split into
// crumbs: up to 16 codes from 4 bytes in t0.
void A64TableOps::unpack_crumbs() {
  unpack_nibbles();
  const a64::Vec c = vq(t_[0]), lo = vq(t_[1]);
  a_.and_(lo.b8(), c.b8(), vq(mask2_).b8());
  a_.ushr(c.b8(), c.b8(), 2);
  a_.zip1(c.b16(), lo.b16(), c.b16());
}

// Codes one per byte in t0 (column order) -> vector k of them as f32 in `dst`. The 16-bit
// widening of all codes happened in load_group (t1: codes 0-7, t0: codes 8-15).
void A64TableOps::codes_to_f32(uint32_t dst, int64_t k) {
  const a64::Vec half = vq(k < 2 ? t_[1] : t_[0]), d = vq(dst);
  if (k % 2 == 0) a_.uxtl(d.s4(), half.h4());
  else a_.uxtl2(d.s4(), half.h8());
  a_.ucvtf(d.s4(), d.s4());
}

template <class Use>
void A64TableOps::load_group(const a64::Gp& base, int64_t offset, int64_t cols, std::span<const uint32_t> dst,
                             Use use) {
  const int64_t nv = (cols + 3) / 4;
  auto target = [&](int64_t k, uint32_t fallback) { return dst.empty() ? fallback : dst[size_t(k)]; };
  switch (key_.table) {
    case DType::kF32: {
      const uint32_t r0 = target(0, t_[0]), r1 = nv > 1 ? target(1, t_[1]) : 0;
      if (cols == 8 && offset % 16 == 0 && offset >= -1024 && offset <= 1008) {
        a_.ldp(vq(r0), vq(r1), a64::ptr(base, int32_t(offset)));
      } else {
        load_bytes(r0, base, offset, 4 * std::min<int64_t>(cols, 4));
        if (nv > 1) load_bytes(r1, base, offset + 16, 4 * (cols - 4));
      }
      use(0, r0);
      if (nv > 1) use(1, r1);
      return;
    }
    case DType::kF16:
    case DType::kBF16: {
      load_bytes(t_[0], base, offset, 2 * cols);
      const uint32_t r0 = target(0, t_[1]), r1 = nv > 1 ? target(1, t_[0]) : 0;
      if (key_.table == DType::kF16) {
        a_.fcvtl(vq(r0).s4(), vq(t_[0]).h4());
        if (nv > 1) a_.fcvtl2(vq(r1).s4(), vq(t_[0]).h8());
      } else {
        a_.shll(vq(r0).s4(), vq(t_[0]).h4(), 16);
        if (nv > 1) a_.shll2(vq(r1).s4(), vq(t_[0]).h8(), 16);
      }
      use(0, r0);
      if (nv > 1) use(1, r1);
      return;
    }
    default: {
      load_bytes(t_[0], base, offset, code_bytes(cols));
      if (key_.table == DType::kQ4) unpack_nibbles();
      if (key_.table == DType::kQ2) unpack_crumbs();
      a_.uxtl(vq(t_[1]).h8(), vq(t_[0]).b8());
      if (nv > 2) a_.uxtl2(vq(t_[0]).h8(), vq(t_[0]).b16());
      for (int64_t k = 0; k < nv; ++k) {
        codes_to_f32(t_[2], k);
        use(k, t_[2]);
      }
    }
  }
}

// Weighted float tables (ref::weighted_terms_fused): one fma per term, as torch's FBGEMM kernel;
// in ATen's loop's arithmetic (padding_idx or aten_loop) f32 and bf16 multiply, then add (an f32
// product rounds; a bf16 product is exact but where it overflows or underflows f32: -inf +
// (2^100 * 2^100) is NaN, the fma -inf). An f16 product is always exact in f32: fmla either way.
void A64TableOps::accumulate(std::span<const uint32_t> acc, const a64::Gp& base, int64_t offset, int64_t cols) {
  if (!bound_) internal("accumulate before bind");
  if (cols < 1 || int64_t(acc.size()) * 4 < cols) internal("accumulate: columns do not fit the accumulators");
  const int64_t group = group_cols();
  for (int64_t c = 0; c < cols; c += group) {
    const int64_t n = std::min(group, cols - c);
    const size_t first = size_t(c / 4);
    load_group(base, offset + code_bytes(c), n, {}, [&](int64_t k, uint32_t x) {
      const a64::Vec a = vq(acc[first + size_t(k)]);
      if (quantized()) {  // B4: fmaf(s, q, f32(acc + b)), FBGEMM's order, every bit width
        a_.fadd(a.s4(), a.s4(), vq(b_).s4());
        a_.fmla(a.s4(), vq(x).s4(), vq(s_).s(0));
      } else if (key_.weighted && !key_.weighted_terms_fused()) {  // see above
        a_.fmul(vq(x).s4(), vq(x).s4(), vq(w_).s(0));
        a_.fadd(a.s4(), a.s4(), vq(x).s4());
      } else if (key_.weighted) {
        a_.fmla(a.s4(), vq(x).s4(), vq(w_).s(0));
      } else {
        a_.fadd(a.s4(), a.s4(), vq(x).s4());
      }
    });
  }
}

void A64TableOps::load_value(std::span<const uint32_t> dst, const a64::Gp& base, int64_t offset, int64_t cols) {
  if (!bound_) internal("load_value before bind");
  if (cols < 1 || int64_t(dst.size()) * 4 < cols) internal("load_value: columns do not fit the registers");
  const int64_t group = group_cols();
  for (int64_t c = 0; c < cols; c += group) {
    const int64_t n = std::min(group, cols - c);
    const std::span<const uint32_t> here = dst.subspan(size_t(c / 4));
    load_group(base, offset + code_bytes(c), n, quantized() ? std::span<const uint32_t>{} : here,
               [&](int64_t k, uint32_t x) {
                 const a64::Vec d = vq(here[size_t(k)]);
                 if (quantized()) {  // fmaf(scale, q, +0 + bias)
                   a_.mov(d.b16(), vq(b_).b16());
                   a_.fmla(d.s4(), vq(x).s4(), vq(s_).s(0));
                 }
               });
  }
}

// Output ----------------------------------------------------------------------------------------

// bf16 round to nearest even of 4 f32 lanes into 16-bit lanes (low or high half of `out`):
// (u + 0x7FFF + bit16(u)) >> 16, with the increment masked off for NaN lanes, which fmax has
// quietened first (the quiet bit is bit 6 of the bf16), so a NaN keeps its sign and stays NaN.
// half_up: rule H6's FBGEMM rounding (u + 0x8000) >> 16, no NaN case (ref f32_to_bf16_half_up).
void A64TableOps::narrow_bf16(uint32_t out, uint32_t src, bool upper, bool half_up) {
  const a64::Vec x = vq(src), q = vq(t_[0]), ordered = vq(t_[1]), inc = vq(t_[2]);
  if (half_up) {  // 0x7FFF + 1: the rounding constants already held
    a_.add(inc.s4(), x.s4(), vq(half_).s4());
    a_.add(inc.s4(), inc.s4(), vq(one_).s4());
    if (upper) a_.shrn2(vq(out).h8(), inc.s4(), 16);
    else a_.shrn(vq(out).h4(), inc.s4(), 16);
    return;
  }
  a_.fmax(q.s4(), x.s4(), x.s4());
  a_.fcmeq(ordered.s4(), x.s4(), x.s4());
  a_.ushr(inc.s4(), q.s4(), 16);
  a_.and_(inc.b16(), inc.b16(), vq(one_).b16());
  a_.add(inc.s4(), inc.s4(), vq(half_).s4());
  a_.and_(inc.b16(), inc.b16(), ordered.b16());
  a_.add(inc.s4(), inc.s4(), q.s4());
  if (upper) a_.shrn2(vq(out).h8(), inc.s4(), 16);
  else a_.shrn(vq(out).h4(), inc.s4(), 16);
}

void A64TableOps::store_output(std::span<const uint32_t> src, const a64::Gp& base, int64_t offset, int64_t cols) {
  if (!bound_) internal("store_output before bind");
  if (cols < 1 || int64_t(src.size()) * 4 < cols) internal("store_output: columns do not fit the registers");
  if (key_.out == DType::kF32) {
    for (int64_t c = 0; c < cols; c += 4)
      store_bytes(src[size_t(c / 4)], base, offset + 4 * c, 4 * std::min<int64_t>(4, cols - c));
    return;
  }
  const uint32_t out = key_.out == DType::kF16 ? t_[0] : t_[3];
  for (int64_t c = 0; c < cols; c += 8) {
    const bool pair = cols - c > 4;
    const uint32_t lo = src[size_t(c / 4)];
    if (key_.out == DType::kF16) {
      a_.fcvtn(vq(out).h4(), vq(lo).s4());
      if (pair) a_.fcvtn2(vq(out).h8(), vq(src[size_t(c / 4 + 1)]).s4());
    } else {
      narrow_bf16(out, lo, false, key_.bf16_out_half_up());
      if (pair) narrow_bf16(out, src[size_t(c / 4 + 1)], true, key_.bf16_out_half_up());
    }
    store_bytes(out, base, offset + 2 * c, 2 * std::min<int64_t>(8, cols - c));
  }
}

// f32 -> the table's half dtype -> f32, in place (bf16 half up when `half_up`, rule H6).
void A64TableOps::round_in_place(uint32_t v, bool half_up) {
  if (key_.table == DType::kF16) {
    a_.fcvtn(vq(t_[0]).h4(), vq(v).s4());
    a_.fcvtl(vq(v).s4(), vq(t_[0]).h4());
  } else {
    narrow_bf16(t_[3], v, false, half_up);
    a_.shll(vq(v).s4(), vq(t_[3]).h4(), 16);
  }
}

// divisor = rnd((float)max(count, 1)) in every lane of `div` (rnd only for f16/bf16 tables).
void A64TableOps::mean_divisor(uint32_t div, const a64::Gp& count) {
  if (!bound_) internal("mean_divisor before bind");
  a_.cmp(count, Imm(1));
  a_.csinc(g_, count, a64::xzr, Imm(uint32_t(a64::CondCode::kGT)));  // count > 1 ? count : 1
  a_.scvtf(a64::s(div), g_);
  if (half_table()) round_in_place(div);
  a_.dup(vq(div).s4(), vq(div).s(0));
}

void A64TableOps::mean_divide(uint32_t acc, uint32_t div) {
  if (!bound_) internal("mean_divide before bind");
  if (half_table()) round_in_place(acc, key_.bf16_fbgemm_path());  // H6: the count to nearest even
  a_.fdiv(vq(acc).s4(), vq(acc).s4(), vq(div).s4());
}

void A64TableOps::mean_finish(std::span<const uint32_t> acc, const a64::Gp& count) {
  const uint32_t div = t_.back();  // not among the temps round_in_place uses
  mean_divisor(div, count);
  for (uint32_t v : acc) mean_divide(v, div);
}

}  // namespace shapejit::jit
