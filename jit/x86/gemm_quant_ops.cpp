// X86GemmQuantOps: see gemm_quant_ops.hpp for why the qd8 forms widen with shifts rather than
// vpmaddubsw, and for the int4 scaling of the `dot` variant.
#include "jit/x86/gemm_quant_ops.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>

#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {

constexpr uint32_t kLowBytesOfWords = 0x00FF00FFu;  // the even bytes of each 16-bit word
constexpr uint32_t kHighNibbles = 0xF0F0F0F0u;      // the top nibble of every byte
constexpr uint32_t kLowNibbles = 0x0F0F0F0Fu;       // the low nibble of every byte
constexpr uint32_t kNibbleSign = 0x08080808u;       // (n ^ 8) - 8 sign-extends a nibble n
constexpr uint32_t kOneWords = 0x00010001u;         // vpmaddwd by ones: adds word pairs
constexpr uint32_t kZeroBias = 128;                 // x_zero - 128 = z, per dword

x86::Mem dword(x86::Mem m) {
  m.setSize(4);
  return m;
}

#define SJ_ARG(field) x86::qword_ptr(body.args, static_cast<int32_t>(offsetof(GemmKernelArgs, field)))

}  // namespace

X86GemmQuantOps::X86GemmQuantOps(const GemmKey& key, x86::Assembler& a)
    : key_(key),
      t_(X86VecTraits::of(key.isa)),
      a_(a),
      nv_(key.nv()),
      mr_(key.mr),
      sign_step_(gemm_x86_sign_step(key.isa, key.quant, key.dot)) {
  const std::string name = key.name();
  if (key.quant == GemmQuant::kF32) throw Error(Status::kInternalError, name + ": not a quantized form");
  if (key.dot && !gemm_quantized_input(key.quant))
    throw Error(Status::kUnsupported, name + ": the dot variant exists for the qd8 forms only");
  if (key.dot && !t_.avx512)
    throw Error(Status::kUnsupported,
                name + ": the dot variant needs AVX-512 VNNI (vpdpbusd); AVX2 kernels widen to 16 bits instead");
}

x86::Vec X86GemmQuantOps::vec(uint32_t id) const {
  return t_.avx512 ? x86::Vec(x86::zmm(id)) : x86::Vec(x86::ymm(id));
}

// Row i's N temporaries: consecutive rows take the body's temporaries in turn, N at a time, so
// one row's products can overlap the next row's broadcasts.
template <size_t N>
std::array<x86::Vec, N> X86GemmQuantOps::row_temps(const X86QuantBody& body, int64_t i) const {
  const size_t groups = std::max<size_t>(1, body.temps.size() / N), first = size_t(i) % groups * N;
  std::array<x86::Vec, N> regs;
  for (size_t r = 0; r < N; ++r) regs[r] = vec(body.temps[first + r]);
  return regs;
}

x86::Mem X86GemmQuantOps::vector_constant(uint32_t dword) {
  auto it = std::find(pool_dwords_.begin(), pool_dwords_.end(), dword);
  const size_t index = size_t(it - pool_dwords_.begin());
  if (it == pool_dwords_.end()) pool_dwords_.push_back(dword);
  if (!pool_.isValid()) pool_ = a_.newLabel();
  return x86::ptr(pool_, static_cast<int32_t>(index * size_t(t_.bytes)));
}

x86::Mem X86GemmQuantOps::int4_values() {
  if (!int4_values_.isValid()) int4_values_ = a_.newLabel();
  return x86::ptr(int4_values_);
}

void X86GemmQuantOps::int4_lookup(const x86::Vec& dst, const x86::Vec& nibbles) {
  if (int4_reg_ != kNoRegister) a_.vpermps(dst, nibbles, vec(int4_reg_));
  else a_.vpermps(dst, nibbles, int4_values());
}

void X86GemmQuantOps::load_held_constants() {
  if (int4_reg_ != kNoRegister) a_.vmovups(vec(int4_reg_), int4_values());
}

void X86GemmQuantOps::load(uint32_t dst, const x86::Mem& src) {
  if (t_.avx512) a_.vmovdqu32(vec(dst), src);
  else a_.vmovdqu(vec(dst), src);
}

void X86GemmQuantOps::emit_qd8_step(const X86QuantBody& body, int64_t set, int32_t x_disp, int32_t b_disp) {
  if (key_.dot) return dot_step(body, set, x_disp, b_disp);
  if (key_.quant == GemmQuant::kQd8Qc4w) return int4_byte_step(body, set, x_disp, b_disp);
  if (sign_step_) return sign_step(body, set, x_disp, b_disp);
  widen_step(body, set, x_disp, b_disp);
}

// int8 codes on AVX2 by sign (gemm_x86_sign_step): per row the 4 signed input codes q broadcast
// (gemm_signed_input: the runtime writes q, not u, which saves a vpxor per row and group) and
// |q|; per vector vpsignb, vpmaddubsw (pair sums <= 2 * 128 * 127 = 32512: exact), vpmaddwd by
// ones, vpaddd. Half the multiplies of widen_step, which on hosts with one integer-multiply pipe
// (Zen 1) is the limit. acc = sum q * code; dequantize corrects with z = x_zero - 128.
void X86GemmQuantOps::sign_step(const X86QuantBody& body, int64_t set, int32_t x_disp, int32_t b_disp) {
  for (int64_t j = 0; j < nv_; ++j)
    load(body.weights[size_t(j)], x86::ptr(body.panel, b_disp + int32_t(j * t_.bytes)));
  const x86::Mem ones = vector_constant(kOneWords);
  for (int64_t i = 0; i < mr_; ++i) {
    const auto [q, mag, prod] = row_temps<3>(body, i);
    a_.vpbroadcastd(q, dword(body.x_row(i, x_disp)));
    a_.vpabsb(mag, q);  // 128 for q = -128, read as unsigned
    for (int64_t j = 0; j < nv_; ++j) {
      const x86::Vec acc = vec(body.acc(set, i, j));
      a_.vpsignb(prod, vec(body.weights[size_t(j)]), q);  // codes are in [-127, 127]: no overflow
      a_.vpmaddubsw(prod, mag, prod);
      a_.vpmaddwd(prod, prod, ones);
      a_.vpaddd(acc, acc, prod);
    }
  }
}

// int4 codes without VNNI: vpmaddubsw is exact here, unlike for int8 codes: each of its pair sums
// is at most 2 * 255 * 8 = 4080 in magnitude, and the two (low and high nibble) results added in
// 16 bits at most 8160, far from the int16 limits. Codes sign-extended to bytes in registers,
// then per row and vector: two vpmaddubsw, vpaddw, vpmaddwd by ones (int32 per column), vpaddd.
void X86GemmQuantOps::int4_byte_step(const X86QuantBody& body, int64_t set, int32_t x_disp, int32_t b_disp) {
  const x86::Mem low = vector_constant(kLowNibbles), sign = vector_constant(kNibbleSign);
  const x86::Mem ones = vector_constant(kOneWords);
  for (int64_t j = 0; j < nv_; ++j) {
    const x86::Vec lo = vec(body.weights[size_t(2 * j)]), hi = vec(body.weights[size_t(2 * j + 1)]);
    load(body.weights[size_t(2 * j + 1)], x86::ptr(body.panel, b_disp + int32_t(j * t_.bytes)));
    if (t_.avx512) {
      a_.vpandd(lo, hi, low);
      a_.vpsrlw(hi, hi, imm(4));
      a_.vpandd(hi, hi, low);
      a_.vpxord(lo, lo, sign);
      a_.vpxord(hi, hi, sign);
    } else {
      a_.vpand(lo, hi, low);
      a_.vpsrlw(hi, hi, imm(4));
      a_.vpand(hi, hi, low);
      a_.vpxor(lo, lo, sign);
      a_.vpxor(hi, hi, sign);
    }
    a_.vpsubb(lo, lo, sign);
    a_.vpsubb(hi, hi, sign);
  }
  for (int64_t i = 0; i < mr_; ++i) {
    const auto [u0, u1, p0, p1] = row_temps<4>(body, i);
    a_.vpbroadcastd(u0, dword(body.x_row(i, x_disp)));      // u of codes 8g .. 8g+3 (low nibbles)
    a_.vpbroadcastd(u1, dword(body.x_row(i, x_disp + 4)));  // and of 8g+4 .. 8g+7 (high nibbles)
    for (int64_t j = 0; j < nv_; ++j) {
      const x86::Vec acc = vec(body.acc(set, i, j));
      a_.vpmaddubsw(p0, u0, vec(body.weights[size_t(2 * j)]));
      a_.vpmaddubsw(p1, u1, vec(body.weights[size_t(2 * j + 1)]));
      a_.vpaddw(p0, p0, p1);
      a_.vpmaddwd(p0, p0, ones);
      a_.vpaddd(acc, acc, p0);
    }
  }
}

// One 4-code group per column (the dword's 4 int8 codes), against input bytes x_disp .. +3.
void X86GemmQuantOps::widen_step(const X86QuantBody& body, int64_t set, int32_t x_disp, int32_t b_disp) {
  // Weights: even = the codes of bytes 0 and 2 of each dword as words, odd = bytes 1 and 3.
  for (int64_t j = 0; j < nv_; ++j) {
    const x86::Vec even = vec(body.weights[size_t(2 * j)]), odd = vec(body.weights[size_t(2 * j + 1)]);
    load(body.weights[size_t(2 * j + 1)], x86::ptr(body.panel, b_disp + int32_t(j * t_.bytes)));
    a_.vpsllw(even, odd, imm(8));
    a_.vpsraw(even, even, imm(8));
    a_.vpsraw(odd, odd, imm(8));
  }
  // Per row: the 4 input bytes broadcast, split into the words (u0, u2) and (u1, u3) (zero-
  // extended: u is unsigned), then two vpmaddwd per vector, each pair sum <= 2 * 255 * 128.
  const x86::Mem mask = vector_constant(kLowBytesOfWords);
  for (int64_t i = 0; i < mr_; ++i) {
    const auto [ue, uo, prod] = row_temps<3>(body, i);
    a_.vpbroadcastd(ue, dword(body.x_row(i, x_disp)));
    a_.vpsrlw(uo, ue, imm(8));
    if (t_.avx512) a_.vpandd(ue, ue, mask);
    else a_.vpand(ue, ue, mask);
    for (int64_t j = 0; j < nv_; ++j) {
      const x86::Vec acc = vec(body.acc(set, i, j));
      a_.vpmaddwd(prod, vec(body.weights[size_t(2 * j)]), ue);
      a_.vpaddd(acc, acc, prod);
      a_.vpmaddwd(prod, vec(body.weights[size_t(2 * j + 1)]), uo);
      a_.vpaddd(acc, acc, prod);
    }
  }
}

// vpdpbusd: 4 u8 x s8 products per dword lane added to the accumulator, without saturation.
void X86GemmQuantOps::dot_step(const X86QuantBody& body, int64_t set, int32_t x_disp, int32_t b_disp) {
  const bool int4 = key_.quant == GemmQuant::kQd8Qc4w;
  for (int64_t j = 0; j < nv_; ++j) {
    const x86::Mem src = x86::ptr(body.panel, b_disp + int32_t(j * t_.bytes));
    if (!int4) {
      load(body.weights[size_t(j)], src);
      continue;
    }
    // 16 x code: the low nibble shifted to the top of its byte, the high nibble masked in place.
    const x86::Vec lo = vec(body.weights[size_t(2 * j)]), hi = vec(body.weights[size_t(2 * j + 1)]);
    const x86::Mem top = vector_constant(kHighNibbles);
    load(body.weights[size_t(2 * j + 1)], src);
    a_.vpsllw(lo, hi, imm(4));
    a_.vpandd(lo, lo, top);
    a_.vpandd(hi, hi, top);
  }
  for (int64_t i = 0; i < mr_; ++i) {
    const x86::Vec u0 = vec(body.temps[size_t((2 * i) % int64_t(body.temps.size()))]);
    const x86::Vec u1 = vec(body.temps[size_t((2 * i + 1) % int64_t(body.temps.size()))]);
    a_.vpbroadcastd(u0, dword(body.x_row(i, x_disp)));
    if (int4) a_.vpbroadcastd(u1, dword(body.x_row(i, x_disp + 4)));
    for (int64_t j = 0; j < nv_; ++j) {
      const x86::Vec acc = vec(body.acc(set, i, j));
      if (!int4) {
        a_.vpdpbusd(acc, u0, vec(body.weights[size_t(j)]));
      } else {
        a_.vpdpbusd(acc, u0, vec(body.weights[size_t(2 * j)]));
        a_.vpdpbusd(acc, u1, vec(body.weights[size_t(2 * j + 1)]));
      }
    }
  }
}

// The lanes code bytes of vector v's columns in the step's panel row (weight-only forms).
x86::Mem X86GemmQuantOps::weight_only_codes_mem(const X86QuantBody& body, int64_t v, int32_t b_disp) const {
  x86::Mem src = x86::ptr(body.panel, b_disp + int32_t(v * t_.lanes));
  src.setSize(uint32_t(t_.lanes));
  return src;
}

void X86GemmQuantOps::emit_weight_only_codes(const X86QuantBody& body, int64_t v, int32_t b_disp, int nibble) {
  if (gemm_int4_planes(key_)) throw Error(Status::kInternalError, key_.name() + ": int4 planes take emit_int4_plane");
  const x86::Vec w = vec(body.weights[size_t(v)]);
  // lanes codes of the vector, one byte each, sign-extended to dwords.
  a_.vpmovsxbd(w, weight_only_codes_mem(body, v, b_disp));
  if (key_.quant == GemmQuant::kF32Qc4w) {
    if (nibble == 0) {  // bits 0-3: to the top of the dword, then arithmetically down
      a_.vpslld(w, w, imm(28));
      a_.vpsrad(w, w, imm(28));
    } else {  // bits 4-7 of the sign-extended byte: its sign is the nibble's
      a_.vpsrad(w, w, imm(4));
    }
  }
  a_.vcvtdq2ps(w, w);
}

void X86GemmQuantOps::emit_int4_group_load(const X86QuantBody& body, int64_t v, int32_t b_disp) {
  if (!gemm_int4_planes(key_)) throw Error(Status::kInternalError, key_.name() + ": no int4 planes here");
  a_.vmovdqu32(vec(body.weights[size_t(nv_ + v)]), x86::ptr(body.panel, b_disp + int32_t(v * t_.bytes)));
}

// vpermps reads only bits 0-3 of each index lane: the plane's nibble picks its code's f32 value
// from a 16-entry table, exactly (a shift brings plane t down; plane 0 needs none).
void X86GemmQuantOps::emit_int4_plane(const X86QuantBody& body, int64_t v, int plane) {
  const x86::Vec codes = vec(body.weights[size_t(nv_ + v)]), w = vec(body.weights[size_t(v)]);
  if (plane == 0) return int4_lookup(w, codes);
  a_.vpsrld(w, codes, imm(4 * plane));
  int4_lookup(w, w);
}

void X86GemmQuantOps::emit_add_accumulators(uint32_t dst, uint32_t a, uint32_t b) {
  if (f32_accumulators()) a_.vaddps(vec(dst), vec(a), vec(b));
  else a_.vpaddd(vec(dst), vec(a), vec(b));
}

// The zero-point correction. acc - z * colsum[c] (z = x_zero[r], or x_zero[r] - 128 by sign)
// in int32, then vcvtdq2ps, is what the contract says; on one-multiply-pipe hosts the vpmulld
// of it (0.25 per cycle on Zen 1) competes with the k loop's vpmaddubsw / vpmaddwd. Where the
// kernel's partial sum acc is at most 2^24 in magnitude (gemm_x86_exact_f32_correction), acc,
// z and colsum[c] are exact as f32, and one FMA, f32(acc) - z * colsum[c] with a single
// rounding, rounds the same exact integer the same way (both under the default rounding of
// MXCSR): the same bits, on the FMA pipes.
void X86GemmQuantOps::emit_dequantize(const X86QuantBody& body, int32_t panel_disp, const x86::Gp& gp0,
                                      const x86::Gp& gp1) {
  const GemmPanelOffsets o = gemm_panel_offsets(key_);
  auto column = [&](int64_t offset, int64_t j) {
    return x86::ptr(body.panel, panel_disp + int32_t(offset + j * t_.bytes));
  };
  std::vector<uint32_t> free = body.temps;
  free.insert(free.end(), body.weights.begin(), body.weights.end());
  const x86::Vec zero_point = vec(free[0]), x_scale = vec(free[1]), tmp = vec(free[2]);
  const bool qd8 = gemm_quantized_input(key_.quant);
  const bool fma_correction = qd8 && gemm_x86_exact_f32_correction(key_);
  if (qd8) {
    a_.mov(gp0, SJ_ARG(x_zero));
    a_.mov(gp1, SJ_ARG(x_scale));
  }
  // fma_correction: colsum as f32, once per panel (free holds temps + weights >= 3 + nv registers).
  auto colsum_f32 = [&](int64_t j) { return vec(free[size_t(3 + j)]); };
  if (fma_correction)
    for (int64_t j = 0; j < nv_; ++j) a_.vcvtdq2ps(colsum_f32(j), column(o.colsum, j));
  for (int64_t i = 0; i < mr_; ++i) {
    if (qd8) {
      a_.vpbroadcastd(zero_point, x86::dword_ptr(gp0, int32_t(i * 4)));
      if (sign_step_) a_.vpsubd(zero_point, zero_point, vector_constant(kZeroBias));
      if (fma_correction) a_.vcvtdq2ps(zero_point, zero_point);
      a_.vbroadcastss(x_scale, x86::dword_ptr(gp1, int32_t(i * 4)));
    }
    for (int64_t j = 0; j < nv_; ++j) {
      const x86::Vec acc = vec(body.acc(0, i, j));
      if (!qd8) {
        a_.vmulps(acc, acc, column(o.wscale, j));
        continue;
      }
      if (key_.dot && key_.quant == GemmQuant::kQd8Qc4w) a_.vpsrad(acc, acc, imm(4));  // 16 x sum, exactly
      if (fma_correction) {
        a_.vcvtdq2ps(acc, acc);                                  // |acc| <= 2^24: exact
        a_.vfnmadd231ps(acc, zero_point, colsum_f32(j));         // f32(acc - z * colsum), one rounding
      } else {
        a_.vpmulld(tmp, zero_point, column(o.colsum, j));
        a_.vpsubd(acc, acc, tmp);
        a_.vcvtdq2ps(acc, acc);
      }
      a_.vmulps(tmp, x_scale, column(o.wscale, j));  // f32(x_scale[r] * wscale[c])
      a_.vmulps(acc, acc, tmp);
    }
  }
}

void X86GemmQuantOps::emit_constants() {
  if (pool_.isValid()) {
    a_.align(AlignMode::kData, 64);
    a_.bind(pool_);
    for (uint32_t dword : pool_dwords_)
      for (int64_t l = 0; l < t_.lanes; ++l) a_.embed(&dword, sizeof(dword));
  }
  if (int4_values_.isValid()) {
    a_.align(AlignMode::kData, 64);
    a_.bind(int4_values_);
    for (int n = 0; n < 16; ++n) {
      const float code = float(n < 8 ? n : n - 16);  // the nibble as a two's-complement int4
      a_.embed(&code, sizeof(code));
    }
  }
}

}  // namespace shapejit::jit
