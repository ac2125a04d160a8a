// X86TableOps, second part: exact-width and masked moves, output rounding (f16 by vcvtps2ph,
// bf16 in integer arithmetic as ref/float16.hpp's f32_to_bf16 and f32_to_bf16_half_up), the mean
// finish and the store.
#include <string>

#include "jit/x86/embag_table_ops.hpp"
#include "jit/x86/embag_table_ops_detail.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;
using table_ops_detail::at;

namespace {

constexpr uint32_t kRoundNearestEven = 0;  // vcvtps2ph imm8: RNE, not MXCSR's mode
constexpr uint32_t kCmpUnordQ = 3;

}  // namespace

// Exact-width moves (AVX2 tails) -----------------------------------------------------------------

// dst = `bytes` (1..16) bytes at m in its low bytes, zeros above (the VEX forms clear the upper
// lanes), read with 16/8/4-byte moves and 4/2/1-byte inserts: never a byte past m + bytes.
void X86TableOps::load_exact(const x86::Xmm& dst, const x86::Mem& m, int64_t bytes) {
  int64_t done = 0;
  if (bytes == 16) {
    a_.vmovdqu(dst, at(m, 0, 16));
    return;
  }
  if (bytes >= 8) a_.vmovq(dst, at(m, 0, 8)), done = 8;
  else if (bytes >= 4) a_.vmovd(dst, at(m, 0, 4)), done = 4;
  else a_.vpxor(dst, dst, dst);
  while (done < bytes) {
    const int64_t left = bytes - done;
    if (left >= 4 && done % 4 == 0) a_.vpinsrd(dst, dst, at(m, done, 4), uint32_t(done / 4)), done += 4;
    else if (left >= 2 && done % 2 == 0) a_.vpinsrw(dst, dst, at(m, done, 2), uint32_t(done / 2)), done += 2;
    else a_.vpinsrb(dst, dst, at(m, done, 1), uint32_t(done)), done += 1;
  }
}

// As load_exact for up to 32 bytes into a ymm; `spare` (another register) takes bytes 16 and up.
void X86TableOps::load_exact_wide(const x86::Vec& dst, const x86::Mem& m, int64_t bytes, const x86::Vec& spare) {
  if (bytes <= 16) {
    load_exact(dst.xmm(), m, bytes);
    return;
  }
  a_.vmovdqu(dst.xmm(), at(m, 0, 16));
  load_exact(spare.xmm(), m.cloneAdjusted(16), bytes - 16);
  a_.vinserti128(dst.ymm(), dst.ymm(), spare.xmm(), 1);
}

// Stores the low `bytes` (1..16) bytes of src at m.
void X86TableOps::store_exact(const x86::Mem& m, const x86::Xmm& src, int64_t bytes) {
  int64_t done = 0;
  if (bytes == 16) {
    a_.vmovdqu(at(m, 0, 16), src);
    return;
  }
  if (bytes >= 8) a_.vmovq(at(m, 0, 8), src), done = 8;
  else if (bytes >= 4) a_.vmovd(at(m, 0, 4), src), done = 4;
  while (done < bytes) {
    const int64_t left = bytes - done;
    if (left >= 4 && done % 4 == 0) a_.vpextrd(at(m, done, 4), src, uint32_t(done / 4)), done += 4;
    else if (left >= 2 && done % 2 == 0) a_.vpextrw(at(m, done, 2), src, uint32_t(done / 2)), done += 2;
    else a_.vpextrb(at(m, done, 1), src, uint32_t(done)), done += 1;
  }
}

// dst = the tail's `bytes` bytes at m (elements of elem_bytes), zeros above: AVX-512 by a
// zero-masked move under k_load_ (fault-suppressing), AVX2 by load_exact (bytes <= 16).
void X86TableOps::masked_load(const x86::Vec& dst, const x86::Mem& m, int64_t elem_bytes, int64_t bytes) {
  if (!avx512_) {
    load_exact(dst.xmm(), m, bytes);
    return;
  }
  const x86::Mem src = at(m, 0, dst.size());
  if (elem_bytes == 1) a_.k(k_load_).z().vmovdqu8(dst, src);
  else a_.k(k_load_).z().vmovdqu16(dst, src);
}

// Rounding ---------------------------------------------------------------------------------------

// temp(0) = f32_to_bf16(src) << 16 plus low garbage, per lane: NaN ? u | 0x00400000 (quiet,
// sign kept) : u + 0x7FFF + ((u >> 16) & 1); the bf16 is the high half. src is unchanged.
// AVX-512 reads its constants from registers (reg_consts_used).
// half_up: f32_to_bf16_half_up instead, u + 0x8000 (rule H6's FBGEMM rounding, FBGEMM's own
// vpaddd of 2^15; the NaNs a sum makes have zero low halves, so no NaN case).
void X86TableOps::bf16_round_bits(const x86::Vec& src, bool half_up) {
  const x86::Vec r = temp(0);
  if (avx512_) {
    if (half_up) {
      a_.vpaddd(r, src, reg_const(kRcHalfUp));
      return;
    }
    a_.vpsrld(r, src, 16);
    a_.vpandd(r, r, reg_const(kRcLowBit));  // bit 16 of u
    a_.vpaddd(r, r, src);
    a_.vpaddd(r, r, reg_const(kRcNearest));
    a_.vcmpps(k_temp_, src, src, kCmpUnordQ);
    a_.k(k_temp_).vpord(r, src, reg_const(kRcQuiet));
    return;
  }
  // AVX2: the constants from all-ones by shifts, the NaN case by a blend.
  const x86::Vec c = temp(1), nan = temp(2);
  if (half_up) {
    a_.vpcmpeqd(c, c, c);
    a_.vpsrld(c, c, 31);
    a_.vpslld(c, c, 15);  // 0x00008000
    a_.vpaddd(r, src, c);
    return;
  }
  a_.vpslld(r, src, 15);  // bit 16 of u to the top ...
  a_.vpsrld(r, r, 31);    // ... and down to bit 0
  a_.vpaddd(r, r, src);
  a_.vpcmpeqd(c, c, c);
  a_.vpsrld(c, c, 17);    // 0x00007FFF
  a_.vpaddd(r, r, c);
  a_.vpcmpeqd(c, c, c);
  a_.vpslld(c, c, 31);
  a_.vpsrld(c, c, 9);     // 0x00400000: the quiet bit
  a_.vcmpps(nan, src, src, kCmpUnordQ);
  a_.vpor(c, c, src);
  a_.vblendvps(r, r, c, nan);
}

// v = rnd(v) in f32 lanes, to f16 or bf16 (the spec's rnd16 / rndbf; rndbf_up when half_up).
void X86TableOps::round_in_place(const x86::Vec& v, DType to, bool half_up) {
  if (to == DType::kF16) {
    a_.vcvtps2ph(temp(0).half(), v, kRoundNearestEven);
    a_.vcvtph2ps(v, temp(0).half());
    return;
  }
  bf16_round_bits(v, half_up);
  if (avx512_) {
    a_.vpandd(v, temp(0), reg_const(kRcHighHalf));
    return;
  }
  a_.vpsrld(temp(0), temp(0), 16);
  a_.vpslld(v, temp(0), 16);
}

// Mean ---------------------------------------------------------------------------------------------

void X86TableOps::mean_divisor(uint32_t div_id, const x86::Gp& count, const x86::Gp& scratch) {
  const x86::Vec div = vec(div_id);
  a_.mov(scratch.r32(), 1);
  a_.cmp(count, 1);
  a_.cmovg(scratch, count);
  a_.vcvtsi2ss(div.xmm(), div.xmm(), scratch.r64());  // IEEE (float)count, nearest even
  a_.vbroadcastss(div, div.xmm());
  if (key_.table == DType::kF16 || key_.table == DType::kBF16) round_in_place(div, key_.table);
}

void X86TableOps::mean_finish(uint32_t acc_id, uint32_t div_id) {
  const x86::Vec acc = vec(acc_id);
  // H6: a bf16 sum on the FBGEMM path rounds half up before the division (the count and the
  // quotient to nearest even).
  if (key_.table == DType::kF16 || key_.table == DType::kBF16) round_in_place(acc, key_.table, key_.bf16_fbgemm_path());
  a_.vdivps(acc, acc, vec(div_id));
}

// Store ---------------------------------------------------------------------------------------------

void X86TableOps::store_output(const x86::Mem& dst, uint32_t src_id, int64_t cols) {
  const x86::Vec src = vec(src_id);
  const bool whole = full(cols);
  const int64_t bytes = col_bytes(key_.out, cols);
  const uint32_t vbytes = static_cast<uint32_t>(lanes_ * 4);
  switch (key_.out) {
    case DType::kF32:
      if (whole) {
        a_.vmovups(at(dst, 0, vbytes), src);
      } else if (avx512_) {
        a_.k(k_store_).vmovups(at(dst, 0, vbytes), src);
      } else {
        const x86::Xmm lo = src.xmm(), hi = temp(0).xmm();
        if (bytes <= 16) {
          store_exact(dst, lo, bytes);
          return;
        }
        a_.vmovups(at(dst, 0, 16), lo);
        a_.vextractf128(hi, src.ymm(), 1);
        store_exact(dst.cloneAdjusted(16), hi, bytes - 16);
      }
      return;
    case DType::kF16:
      if (whole) {
        a_.vcvtps2ph(at(dst, 0, vbytes / 2), src, kRoundNearestEven);
        return;
      }
      a_.vcvtps2ph(temp(0).half(), src, kRoundNearestEven);
      if (avx512_) a_.k(k_store_).vmovdqu16(at(dst, 0, vbytes / 2), temp(0).half());
      else store_exact(dst, temp(0).xmm(), bytes);
      return;
    case DType::kBF16: {
      bf16_round_bits(src, key_.bf16_out_half_up());
      const x86::Vec r = temp(0);
      a_.vpsrld(r, r, 16);
      if (avx512_) {
        a_.vpmovdw(r.half(), r);
        if (whole) a_.vmovdqu16(at(dst, 0, vbytes / 2), r.half());
        else a_.k(k_store_).vmovdqu16(at(dst, 0, vbytes / 2), r.half());
        return;
      }
      a_.vextracti128(temp(1).xmm(), r.ymm(), 1);
      a_.vpackusdw(r.xmm(), r.xmm(), temp(1).xmm());  // values <= 0xFFFF: exact
      if (whole) a_.vmovdqu(at(dst, 0, 16), r.xmm());
      else store_exact(dst, r.xmm(), bytes);
      return;
    }
    default: throw Error(Status::kInternalError, "x86 table ops: output must be f32, f16 or bf16");
  }
}

}  // namespace shapejit::jit
