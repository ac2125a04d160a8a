// The base every kernel emitter builds on: it owns asmjit error recording, assembler
// validation, the register pools and the function frame (prologue, epilogue, ABI), so the
// op-specific emitters only describe their loops.
#pragma once

#include <asmjit/core.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace shapejit::jit {

/// Keeps the first asmjit error of a generation; later ones are usually its consequences.
class AsmErrorRecorder : public asmjit::ErrorHandler {
 public:
  void handleError(asmjit::Error err, const char* message, asmjit::BaseEmitter* origin) override;
  bool failed() const { return error_ != asmjit::kErrorOk; }
  asmjit::Error error() const { return error_; }
  const std::string& message() const { return message_; }

 private:
  asmjit::Error error_ = asmjit::kErrorOk;
  std::string message_;
};

/// Physical registers of one group handed out by role, so no two roles share a register.
/// The registers taken are the ones the frame marks dirty (and saves when callee-saved).
class RegPool {
 public:
  /// `order` lists the usable register ids, preferred (cheapest to use) first.
  RegPool(asmjit::RegGroup group, std::vector<uint32_t> order);
  /// Takes the next free register id; throws kInternalError when the pool is exhausted.
  uint32_t take();
  /// Takes a specific register id (e.g. the incoming argument register).
  uint32_t take(uint32_t id);
  /// Number of registers still free.
  uint32_t available() const { return static_cast<uint32_t>(free_.size()); }
  asmjit::RegGroup group() const { return group_; }
  asmjit::RegMask used() const { return used_; }

 private:
  asmjit::RegGroup group_;
  std::vector<uint32_t> free_;
  asmjit::RegMask used_ = 0;
};

/// Frame properties an emitter asks for (x86 AVX state; ignored on other architectures).
struct FrameOptions {
  bool avx = false;     ///< the body uses VEX/EVEX code: emit vzeroupper on exit
  bool avx512 = false;  ///< the body uses zmm16-31 / k registers
};

/// Base of every emitter of a `void kernel(const Args*)` function.
class KernelEmitter {
 public:
  KernelEmitter(const KernelEmitter&) = delete;
  KernelEmitter& operator=(const KernelEmitter&) = delete;

 protected:
  /// Installs the error recorder on `code`; `kernel_name` prefixes every error message.
  KernelEmitter(asmjit::CodeHolder& code, std::string kernel_name);
  ~KernelEmitter();

  /// Turns on validation for the architecture emitter the derived class created on `code`.
  void attach(asmjit::BaseEmitter& emitter);
  /// Emits the prologue: saves the callee-saved registers taken from `pools` and moves the
  /// single pointer argument into `arg_reg`.
  void emit_prolog(const asmjit::BaseReg& arg_reg, std::initializer_list<const RegPool*> pools,
                   FrameOptions options);
  /// Emits the epilogue matching emit_prolog (restores registers, vzeroupper, ret).
  void emit_epilog();
  /// Throws shapejit::Error(kInternalError) naming the kernel, `step` and asmjit's message
  /// when any asmjit call so far failed.
  void check(const char* step) const;
  /// Throws shapejit::Error(kUnsupported) naming the kernel and `why`.
  [[noreturn]] void unsupported(const std::string& why) const;

  const std::string& kernel_name() const { return name_; }
  asmjit::CodeHolder& code() { return code_; }
  const asmjit::CodeHolder& code() const { return code_; }

 private:
  asmjit::CodeHolder& code_;
  std::string name_;
  AsmErrorRecorder recorder_;
  asmjit::ErrorHandler* previous_handler_ = nullptr;
  asmjit::BaseEmitter* emitter_ = nullptr;
  asmjit::FuncDetail func_;
  asmjit::FuncFrame frame_;
  bool in_function_ = false;
};

}  // namespace shapejit::jit
