#include "jit/kernel_emitter.hpp"

#include <algorithm>
#include <utility>

#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

void AsmErrorRecorder::handleError(asmjit::Error err, const char* message, asmjit::BaseEmitter*) {
  if (failed()) return;
  error_ = err;
  message_ = message ? message : asmjit::DebugUtils::errorAsString(err);
}

// RegPool -------------------------------------------------------------------------------------

RegPool::RegPool(asmjit::RegGroup group, std::vector<uint32_t> order)
    : group_(group), free_(std::move(order)) {}

uint32_t RegPool::take() {
  if (free_.empty())
    throw Error(Status::kInternalError, "register pool exhausted (the emitter's register plan is wrong)");
  const uint32_t id = free_.front();
  free_.erase(free_.begin());
  used_ |= asmjit::RegMask(1) << id;
  return id;
}

uint32_t RegPool::take(uint32_t id) {
  const auto it = std::find(free_.begin(), free_.end(), id);
  if (it == free_.end())
    throw Error(Status::kInternalError, "register " + std::to_string(id) + " taken twice");
  free_.erase(it);
  used_ |= asmjit::RegMask(1) << id;
  return id;
}

// KernelEmitter ---------------------------------------------------------------------------------

KernelEmitter::KernelEmitter(asmjit::CodeHolder& code, std::string kernel_name)
    : code_(code), name_(std::move(kernel_name)) {
  previous_handler_ = code_.errorHandler();
  code_.setErrorHandler(&recorder_);
}

KernelEmitter::~KernelEmitter() { code_.setErrorHandler(previous_handler_); }

void KernelEmitter::attach(asmjit::BaseEmitter& emitter) {
  emitter_ = &emitter;
  emitter.setErrorHandler(&recorder_);
  // Without validation asmjit silently drops e.g. a {k} on a VEX-only instruction.
  emitter.addDiagnosticOptions(asmjit::DiagnosticOptions::kValidateAssembler);
  check("attach");
}

void KernelEmitter::emit_prolog(const asmjit::BaseReg& arg_reg,
                                std::initializer_list<const RegPool*> pools, FrameOptions options) {
  using namespace asmjit;
  if (!emitter_ || in_function_)
    throw Error(Status::kInternalError, name_ + ": emit_prolog called out of order");
  // Every kernel is `void fn(const Args*)` in the host calling convention.
  func_.init(FuncSignatureT<void, const void*>(CallConvId::kHost), code_.environment());
  frame_.init(func_);
  if (options.avx) {
    frame_.setAvxEnabled();
    frame_.setAvxCleanup();
  }
  if (options.avx512) frame_.setAvx512Enabled();
  for (const RegPool* pool : pools) frame_.addDirtyRegs(pool->group(), pool->used());

  FuncArgsAssignment args(&func_);
  args.assignAll(arg_reg);
  args.updateFuncFrame(frame_);
  frame_.finalize();
  emitter_->emitProlog(frame_);
  emitter_->emitArgsAssignment(frame_, args);
  in_function_ = true;
  check("prologue");
}

void KernelEmitter::emit_epilog() {
  if (!in_function_) throw Error(Status::kInternalError, name_ + ": emit_epilog without prologue");
  emitter_->emitEpilog(frame_);
  in_function_ = false;
  check("epilogue");
}

void KernelEmitter::check(const char* step) const {
  if (!recorder_.failed()) return;
  throw Error(Status::kInternalError, name_ + ": code generation failed in " + step +
                                          ": asmjit: " + recorder_.message());
}

void KernelEmitter::unsupported(const std::string& why) const {
  throw Error(Status::kUnsupported, name_ + ": " + why);
}

}  // namespace shapejit::jit
