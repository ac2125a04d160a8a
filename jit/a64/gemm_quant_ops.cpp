// A64GemmQuantOps: see gemm_quant_ops.hpp for the arithmetic of each form.
//
// The skeleton's k loop hands over steps: a full step reads 16 bytes of each row (qd8 .dot: 4
// groups of 4 codes, one `sdot` lane each; f32 forms: 4 floats, one `fmla` lane each) or 8
// bytes (qd8 widening: 8 codes widened to the 8 halves of one register); what K leaves after
// the full steps comes in steps of 8 and 4 bytes (a64_quant_rest_step_k), so no row is read
// past gemm_padded_k bytes (qd8) or k floats (f32 forms). Panels are read only inside
// gemm_panel_bytes.
#include "jit/a64/gemm_quant_ops.hpp"

#include <algorithm>
#include <string>

#include "jit/a64/prefetch.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {

constexpr int64_t kVecBytes = 16;

a64::Vec vq(uint32_t id) { return a64::v(id); }

// tbl indices turning 4 columns x 4 consecutive k (the qd8 panel's 16 bytes) into 4 k x 4
// columns: byte 4j + c of the result is byte 4c + j of the source.
constexpr uint64_t kTransposeLo = 0x0D0905010C080400ull, kTransposeHi = 0x0F0B07030E0A0602ull;

#define SJ_ARG(field) offsetof(GemmKernelArgs, field)

}  // namespace

int a64_quant_temps(const GemmKey& key) {
  // qd8: 2 (widening: 3) in the k loop, 3 in dequantize; every form: one per bias vector.
  const int nv = key.nv();
  return gemm_quantized_input(key.quant) ? std::max(nv, 3) : nv;
}

A64GemmQuantOps::A64GemmQuantOps(const GemmKey& key, a64::Assembler& a, A64QuantRegs regs, std::string name)
    : key_(key), a_(a), r_(std::move(regs)), name_(std::move(name)), nv_(key.nv()), mr_(key.mr),
      width_(gemm_panel_width(key)) {
  auto unsupported = [&](const std::string& why) { throw Error(Status::kUnsupported, name_ + ": " + why); };
  if (key.quant == GemmQuant::kF32) unsupported("the quantized primitives need a quantized form");
  // The contract's limits (K, the dot variant's forms) are the skeleton's key check.
  if (int64_t(r_.temps.size()) < a64_quant_temps(key) || int64_t(r_.x.size()) != mr_ ||
      int64_t(r_.acc.size()) != mr_ * nv_ || int64_t(r_.rows.size()) != mr_)
    throw Error(Status::kInternalError, name_ + ": the quantized primitives got too few registers");
  for (uint32_t id : r_.x)
    if (id >= 16) throw Error(Status::kInternalError, name_ + ": X registers must be v0-v15 (smlal by element)");
}

// Helpers ---------------------------------------------------------------------------------------

void A64GemmQuantOps::add_imm(const a64::Gp& dst, const a64::Gp& src, int64_t value) {
  const uint64_t magnitude = value < 0 ? uint64_t(0) - uint64_t(value) : uint64_t(value);
  if (magnitude < 4096) {
    if (value > 0 || dst.id() != src.id()) {
      if (value >= 0) a_.add(dst, src, Imm(magnitude));
      else a_.sub(dst, src, Imm(magnitude));
    }
    return;
  }
  if (src.id() == r_.scratch.id())
    throw Error(Status::kInternalError, name_ + ": add_imm needs scratch for a large step");
  a_.mov(r_.scratch, Imm(magnitude));
  if (value >= 0) a_.add(dst, src, r_.scratch);
  else a_.sub(dst, src, r_.scratch);
}

// dst (a q, d or s view, `bytes` wide) = [base + off]: the scaled or unscaled immediate when
// one encodes the offset, else the address through scratch.
void A64GemmQuantOps::load_vec(const a64::Vec& dst, int64_t bytes, const a64::Gp& base, int64_t off) {
  const bool scaled = off >= 0 && off % bytes == 0 && off / bytes < 4096;
  if (scaled || (off >= -256 && off <= 255)) {
    a_.ldr(dst, a64::ptr(base, static_cast<int32_t>(off)));
    return;
  }
  add_imm(r_.scratch, base, off);
  a_.ldr(dst, a64::ptr(r_.scratch));
}

void A64GemmQuantOps::prefetch(int64_t offset) {
  offset &= ~int64_t(7);
  a64::Gp base = r_.b;
  if (offset > 32760) {
    a_.mov(r_.scratch, Imm(uint64_t(offset)));
    a_.add(r_.scratch, r_.scratch, r_.b);
    base = r_.scratch, offset = 0;
  }
  if (a_.code()->logger())
    a_.comment(("prfm pldl1keep, [x" + std::to_string(base.id()) + ", " + std::to_string(offset) + "]").c_str());
  a_.embedUInt32(encode_prfm_pldl1keep(base.id(), offset));
}

// The cache lines of a step's weights, `prefetch` bytes ahead of them.
void A64GemmQuantOps::prefetch_span(int64_t b_off, int64_t bytes) {
  if (key_.prefetch <= 0) return;
  for (int64_t off = b_off; off < b_off + bytes; off += 64) prefetch(off + key_.prefetch);
}

// Shape of the k steps -----------------------------------------------------------------------------

int64_t A64GemmQuantOps::x_bytes_per_k() const { return gemm_quantized_input(key_.quant) ? 1 : 4; }

int64_t a64_quant_step_k(const GemmKey& key) {
  if (!gemm_quantized_input(key.quant)) return 4;  // one q register of floats
  return key.dot ? 16 : 8;                          // 16 codes for sdot lanes, 8 halves widened
}

int64_t a64_quant_rest_step_k(const GemmKey& key, int64_t left) {
  if (gemm_quantized_input(key.quant)) return left >= 8 ? 8 : 4;  // whole groups: 8 or 4 bytes
  return left >= 2 ? 2 : 1;                                       // 2 floats (8 bytes) or 1
}

int64_t A64GemmQuantOps::weight_offset(int64_t k) const {
  switch (key_.quant) {
    case GemmQuant::kQd8Qc8w:
    case GemmQuant::kF32Qc8w: return k * width_;
    case GemmQuant::kQd8Qc4w: return k * width_ / 2;
    case GemmQuant::kF32Qc4w: return k / 2 * width_;
    case GemmQuant::kF32: break;
  }
  return 0;
}

// Step: panel start ------------------------------------------------------------------------------

void A64GemmQuantOps::load_constant() {
  if (!gemm_quantized_input(key_.quant)) return;
  const a64::Vec k = vq(r_.constant);
  if (key_.dot) {
    a_.movi(k.b16(), 0x80);
  } else {
    a_.mov(r_.scratch, Imm(kTransposeLo));
    a_.fmov(a64::d(r_.constant), r_.scratch);
    a_.mov(r_.scratch, Imm(kTransposeHi));
    a_.mov(k.d(1), r_.scratch);
  }
}

// Step: k step -----------------------------------------------------------------------------------

void A64GemmQuantOps::load_x(int64_t x_bytes, int64_t a_off, bool post) {
  for (int64_t i = 0; i < mr_; ++i) {
    const uint32_t id = r_.x[size_t(i)];
    const a64::Vec dst = x_bytes == 16 ? a64::Vec(a64::v(id)) : x_bytes == 8 ? a64::Vec(a64::d(id)) : a64::Vec(a64::s(id));
    const a64::Gp& p = r_.rows[size_t(i)];
    if (post) a_.ldr(dst, a64::ptr_post(p, static_cast<int32_t>(x_bytes)));
    else a_.ldr(dst, a64::ptr(p, static_cast<int32_t>(a_off)));
    if (!gemm_quantized_input(key_.quant)) continue;
    if (key_.dot) a_.eor(vq(id).b16(), vq(id).b16(), vq(r_.constant).b16());  // u ^ 0x80 = q as s8
    else a_.uxtl(vq(id).h8(), vq(id).b8());
  }
}

void A64GemmQuantOps::step(int64_t k0, int64_t width, bool post) {
  const int64_t x_bytes = width * x_bytes_per_k();
  if (x_bytes != 4 && x_bytes != 8 && x_bytes != 16)
    throw Error(Status::kInternalError, name_ + ": a k step reads 4, 8 or 16 bytes of X");
  const int64_t b_off = weight_offset(k0);
  prefetch_span(b_off, weight_offset(k0 + width) - b_off);
  load_x(x_bytes, k0 * x_bytes_per_k(), post);
  const int64_t group = width_ * 4;  // bytes of one 4-byte group (or int4 group) of every column
  switch (key_.quant) {
    case GemmQuant::kQd8Qc8w:
      for (int64_t g = 0; g < width / 4; ++g) {
        if (key_.dot) dot_group_c8(b_off + g * group, uint32_t(g));
        else widen_group_c8(b_off + g * group, uint32_t(4 * g));
      }
      break;
    case GemmQuant::kQd8Qc4w:
      for (int64_t g = 0; g < width / 8; ++g) {
        if (key_.dot) dot_group_c4(b_off + g * group, uint32_t(2 * g));
        else widen_group_c4(b_off + g * group);
      }
      break;
    case GemmQuant::kF32Qc8w:
      for (int64_t kk = 0; kk < width; ++kk) f32_row_c8(b_off + kk * width_, uint32_t(kk));
      break;
    case GemmQuant::kF32Qc4w:
      // Packed row kk / 2 holds k kk (low nibble) and kk + 1 (high); a step may start or end
      // inside a row.
      for (int64_t kk = k0; kk < k0 + width;) {
        const int64_t lo = kk % 2 == 0 ? kk - k0 : -1;
        const int64_t hi = kk % 2 == 0 ? (kk + 1 < k0 + width ? kk + 1 - k0 : -1) : kk - k0;
        f32_row_c4(weight_offset(kk), lo, hi);
        kk = kk / 2 * 2 + 2;
      }
      break;
    case GemmQuant::kF32: break;
  }
}

// One 4-k group of qc8w codes: nv vectors of 4 columns x 4 codes, one sdot per row and vector
// with the group's 4 X codes (lane `lane` of the row's register).
void A64GemmQuantOps::dot_group_c8(int64_t b_off, uint32_t lane) {
  for (int64_t j = 0; j < nv_;) {
    const int64_t off = b_off + j * kVecBytes;
    if (j + 1 < nv_ && off >= -1024 && off <= 1008 && off % 16 == 0) {
      a_.ldp(vq(r_.temps[size_t(j)]), vq(r_.temps[size_t(j + 1)]), a64::ptr(r_.b, static_cast<int32_t>(off)));
      j += 2;
    } else {
      load_vec(vq(r_.temps[size_t(j)]), kVecBytes, r_.b, off);
      ++j;
    }
  }
  for (int64_t i = 0; i < mr_; ++i)
    for (int64_t j = 0; j < nv_; ++j)
      a_.sdot(vq(acc(i, j)).s4(), vq(r_.temps[size_t(j)]).b16(), vq(r_.x[size_t(i)]).b4(lane));
}

// One 8-k group of qc4w codes: per vector, the low nibbles (k 0-3 of the group) and the high
// nibbles (k 4-7) sign-extended to s8, each dotted with its 4 X codes (lanes `lane`, lane + 1).
void A64GemmQuantOps::dot_group_c4(int64_t b_off, uint32_t lane) {
  const size_t pairs = r_.temps.size() / 2;
  for (int64_t j = 0; j < nv_; ++j) {
    const a64::Vec lo = vq(r_.temps[2 * (size_t(j) % pairs)]), hi = vq(r_.temps[2 * (size_t(j) % pairs) + 1]);
    load_vec(hi, kVecBytes, r_.b, b_off + j * kVecBytes);
    a_.shl(lo.b16(), hi.b16(), 4);
    a_.sshr(lo.b16(), lo.b16(), 4);
    a_.sshr(hi.b16(), hi.b16(), 4);
    for (int64_t i = 0; i < mr_; ++i) {
      const a64::Vec x = vq(r_.x[size_t(i)]);
      a_.sdot(vq(acc(i, j)).s4(), lo.b16(), x.b4(lane));
      a_.sdot(vq(acc(i, j)).s4(), hi.b16(), x.b4(lane + 1));
    }
  }
}

// One 4-k group of qc8w codes without sdot: the vector's 16 codes transposed to 4 k x 4
// columns, widened to s16 (k 0-1 in t0, k 2-3 in t1), and multiplied-accumulated into int32 by
// the row's widened X codes (halves hlane .. hlane + 3).
void A64GemmQuantOps::widen_group_c8(int64_t b_off, uint32_t hlane) {
  const size_t pairs = r_.temps.size() / 2;
  const a64::Vec idx = vq(r_.constant);
  for (int64_t j = 0; j < nv_; ++j) {
    const a64::Vec t0 = vq(r_.temps[2 * (size_t(j) % pairs)]), t1 = vq(r_.temps[2 * (size_t(j) % pairs) + 1]);
    load_vec(t0, kVecBytes, r_.b, b_off + j * kVecBytes);
    a_.tbl(t1.b16(), t0.b16(), idx.b16());
    a_.sxtl(t0.h8(), t1.b8());
    a_.sxtl2(t1.h8(), t1.b16());
    for (int64_t i = 0; i < mr_; ++i) {
      const a64::Vec x = vq(r_.x[size_t(i)]), c = vq(acc(i, j)).s4();
      a_.smlal(c, t0.h4(), x.h(hlane));
      a_.smlal2(c, t0.h8(), x.h(hlane + 1));
      a_.smlal(c, t1.h4(), x.h(hlane + 2));
      a_.smlal2(c, t1.h8(), x.h(hlane + 3));
    }
  }
}

// One 8-k group of qc4w codes without sdot: transposed as above, the nibbles sign-extended to
// s8 (low: k 0-3, high: k 4-7) and then to s16, against halves 0-7 of the row's X register.
void A64GemmQuantOps::widen_group_c4(int64_t b_off) {
  const size_t triples = r_.temps.size() / 3;
  const a64::Vec idx = vq(r_.constant);
  for (int64_t j = 0; j < nv_; ++j) {
    const size_t base = 3 * (size_t(j) % triples);
    const a64::Vec t0 = vq(r_.temps[base]), t1 = vq(r_.temps[base + 1]), t2 = vq(r_.temps[base + 2]);
    load_vec(t0, kVecBytes, r_.b, b_off + j * kVecBytes);
    a_.tbl(t1.b16(), t0.b16(), idx.b16());
    a_.shl(t0.b16(), t1.b16(), 4);
    a_.sshr(t0.b16(), t0.b16(), 4);
    a_.sshr(t1.b16(), t1.b16(), 4);
    for (int half = 0; half < 2; ++half) {
      const a64::Vec src = half == 0 ? t0 : t1;
      a_.sxtl(t2.h8(), src.b8());
      a_.sxtl2(src.h8(), src.b16());
      const uint32_t h = uint32_t(4 * half);
      for (int64_t i = 0; i < mr_; ++i) {
        const a64::Vec x = vq(r_.x[size_t(i)]), c = vq(acc(i, j)).s4();
        a_.smlal(c, t2.h4(), x.h(h));
        a_.smlal2(c, t2.h8(), x.h(h + 1));
        a_.smlal(c, src.h4(), x.h(h + 2));
        a_.smlal2(c, src.h8(), x.h(h + 3));
      }
    }
  }
}

// One k of qc8w codes for the f32 forms: the panel row's W codes (bytes) into temps[0].
void A64GemmQuantOps::f32_row_c8(int64_t b_off, uint32_t lane) {
  const uint32_t t = r_.temps[0];
  // nv 3 reads 4 bytes past the row: the next row or the wscale vector, inside the panel.
  if (nv_ == 1) load_vec(a64::s(t), 4, r_.b, b_off);
  else if (nv_ == 2) load_vec(a64::d(t), 8, r_.b, b_off);
  else load_vec(a64::v(t), kVecBytes, r_.b, b_off);
  codes_to_f32(lane);
}

// Up to two k of qc4w codes for the f32 forms, one packed row (into `constant`): the low
// nibbles are a k multiplied by X lane `lo`, the high ones a k by lane `hi` (-1: not this step's).
void A64GemmQuantOps::f32_row_c4(int64_t b_off, int64_t lo, int64_t hi) {
  const uint32_t raw = r_.constant;
  if (nv_ == 1) load_vec(a64::s(raw), 4, r_.b, b_off);
  else if (nv_ == 2) load_vec(a64::d(raw), 8, r_.b, b_off);
  else load_vec(a64::v(raw), kVecBytes, r_.b, b_off);
  const a64::Vec t = vq(r_.temps[0]);
  if (lo >= 0) {
    a_.shl(t.b16(), vq(raw).b16(), 4);
    a_.sshr(t.b16(), t.b16(), 4);
    codes_to_f32(uint32_t(lo));
  }
  if (hi >= 0) {
    a_.sshr(t.b16(), vq(raw).b16(), 4);
    codes_to_f32(uint32_t(hi));
  }
}

// temps[0] holds the s8 codes of columns 0 .. 4 nv - 1 for one k: widen them in place to nv
// f32 vectors temps[0 .. nv-1] and add X[r, k] (lane `lane` of the row's register) times them.
void A64GemmQuantOps::codes_to_f32(uint32_t lane) {
  auto t = [&](int64_t j) { return vq(r_.temps[size_t(j)]); };
  if (nv_ > 2) a_.sxtl2(t(2).h8(), t(0).b16());
  a_.sxtl(t(0).h8(), t(0).b8());
  if (nv_ > 1) a_.sxtl2(t(1).s4(), t(0).h8());
  a_.sxtl(t(0).s4(), t(0).h4());
  if (nv_ > 3) a_.sxtl2(t(3).s4(), t(2).h8());
  if (nv_ > 2) a_.sxtl(t(2).s4(), t(2).h4());
  for (int64_t j = 0; j < nv_; ++j) a_.scvtf(t(j).s4(), t(j).s4());
  for (int64_t i = 0; i < mr_; ++i)
    for (int64_t j = 0; j < nv_; ++j) a_.fmla(vq(acc(i, j)).s4(), t(j).s4(), vq(r_.x[size_t(i)]).s(lane));
}

// Step: dequantize --------------------------------------------------------------------------------

void A64GemmQuantOps::dequantize(int64_t b_consumed) {
  consumed_ = b_consumed;
  bias_loaded_ = 0;
  if (gemm_quantized_input(key_.quant)) dequantize_qd8();
  else dequantize_weight_only();
}

// Per row r: lane 0 of its X register = the zero point the accumulation needs (x_zero - 128
// after the flip, x_zero for widened u), lane 1 = x_scale[r]. Per vector: acc -= zero * colsum
// (int32, wrapping), float(acc), times f32(wscale * x_scale): two roundings, no FMA.
void A64GemmQuantOps::dequantize_qd8() {
  const a64::Gp w = a64::w(r_.scratch.id());
  a_.ldr(r_.gp1, a64::ptr(r_.args, static_cast<int32_t>(SJ_ARG(x_zero))));
  for (int64_t i = 0; i < mr_; ++i) {
    a_.ldr(w, a64::ptr(r_.gp1, static_cast<int32_t>(4 * i)));
    if (key_.dot) a_.sub(w, w, Imm(128));
    a_.fmov(a64::s(r_.x[size_t(i)]), w);
  }
  a_.ldr(r_.gp1, a64::ptr(r_.args, static_cast<int32_t>(SJ_ARG(x_scale))));
  for (int64_t i = 0; i < mr_; ++i) {
    a_.ldr(w, a64::ptr(r_.gp1, static_cast<int32_t>(4 * i)));
    a_.mov(vq(r_.x[size_t(i)]).s(1), w);
  }
  const GemmPanelOffsets o = gemm_panel_offsets(key_);
  add_imm(r_.gp2, r_.b, o.colsum - consumed_);
  trailer_ = o.colsum;
  const a64::Vec tc = vq(r_.temps[0]), tw = vq(r_.temps[1]), tp = vq(r_.temps[2]);
  for (int64_t j = 0; j < nv_; ++j) {
    load_vec(tc, kVecBytes, r_.gp2, j * kVecBytes);
    for (int64_t i = 0; i < mr_; ++i) {
      const a64::Vec c = vq(acc(i, j)).s4();
      a_.mls(c, tc.s4(), vq(r_.x[size_t(i)]).s(0));
      a_.scvtf(c, c);
    }
    load_vec(tw, kVecBytes, r_.gp2, o.wscale - o.colsum + j * kVecBytes);
    for (int64_t i = 0; i < mr_; ++i) {
      const a64::Vec c = vq(acc(i, j)).s4();
      a_.fmul(tp.s4(), tw.s4(), vq(r_.x[size_t(i)]).s(1));
      a_.fmul(c, c, tp.s4());
    }
  }
}

// acc * wscale (fmul; the bias is added after, on its own).
void A64GemmQuantOps::dequantize_weight_only() {
  const GemmPanelOffsets o = gemm_panel_offsets(key_);
  add_imm(r_.gp2, r_.b, o.wscale - consumed_);
  trailer_ = o.wscale;
  const a64::Vec tw = vq(r_.temps[0]);
  for (int64_t j = 0; j < nv_; ++j) {
    load_vec(tw, kVecBytes, r_.gp2, j * kVecBytes);
    for (int64_t i = 0; i < mr_; ++i) a_.fmul(vq(acc(i, j)).s4(), vq(acc(i, j)).s4(), tw.s4());
  }
}

// The bias vector v goes to temps[v] the first time a panel's epilogue asks for it.
void A64GemmQuantOps::add_bias(uint32_t acc_id, int64_t v) {
  if (!key_.bias) throw Error(Status::kInternalError, name_ + ": add_bias without a bias row");
  if (v < 0 || v >= nv_ || size_t(v) >= r_.temps.size())
    throw Error(Status::kInternalError, name_ + ": add_bias of vector " + std::to_string(v));
  const a64::Vec t = vq(r_.temps[size_t(v)]);
  if (!(bias_loaded_ & (1u << v))) {
    load_vec(t, kVecBytes, r_.gp2, gemm_panel_offsets(key_).bias - trailer_ + v * kVecBytes);
    bias_loaded_ |= 1u << v;
  }
  a_.fadd(vq(acc_id).s4(), vq(acc_id).s4(), t.s4());
}

}  // namespace shapejit::jit
