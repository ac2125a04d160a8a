// Calls for the out-of-memory sweeps: deterministic embedding-bag inputs per mode, linear groups
// in the layouts the engine runs differently, and the sweep over "fail allocation k".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "oom/alloc_injector.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::test::oom {

/// One embedding-bag variant.
struct EmbagVariant {
  const char* name;
  shapejit_mode mode;
  bool weighted = false;
  bool padding = false;
  bool partial_final_offset = false;  ///< ATen's quirk: the runtime sends it to the reference
};

/// Every mode, with and without padding, weighted sum, and the reference path.
extern const std::vector<EmbagVariant> kEmbagVariants;

/// The inputs of one call: 512 bags of 8 indices into 997 rows of `dim` small integers (exact
/// sums), large enough from dim 16 on to run in several chunks on a two-thread engine.
class EmbagInputs {
 public:
  EmbagInputs(const EmbagVariant& variant, int64_t dim);
  const shapejit_embedding_bag_args& args() const { return args_; }
  shapejit_embedding_bag_shapes shapes() const;

 private:
  std::vector<float> weight_, per_sample_weights_;
  std::vector<int64_t> indices_, offsets_;
  shapejit_embedding_bag_args args_{};
};

/// One linear-group layout.
struct LinearVariant {
  const char* name;
  int parts;
  bool shared_input;    ///< every part reads the same X
  bool head_split;      ///< alternating head-split layouts, heads narrower and wider than a vector
  int64_t m;            ///< rows per run: small ones run part by part, large ones on the engine
};

extern const std::vector<LinearVariant> kLinearVariants;

/// A created group with its inputs and outputs (outputs start at a sentinel).
class LinearCase {
 public:
  explicit LinearCase(const LinearVariant& variant);
  ~LinearCase();
  LinearCase(const LinearCase&) = delete;
  LinearCase& operator=(const LinearCase&) = delete;

  /// Fills every output with the sentinel pattern.
  void reset_outputs();
  /// Runs the group through the C ABI.
  shapejit_status run();
  /// Every output byte, in part order.
  std::vector<unsigned char> output_bytes() const;
  /// True when every output still holds the sentinel pattern.
  bool untouched() const;

 private:
  shapejit_linear_group* group_ = nullptr;
  std::vector<float> weight_, bias_;
  std::vector<std::vector<float>> inputs_, outputs_;
  std::vector<shapejit_linear_group_io> io_;
};

/// What one sweep over k saw.
struct SweepStats {
  int64_t attempts = 0;        ///< values of k tried (the last one injected nothing)
  int64_t out_of_memory = 0;   ///< attempts that returned SHAPEJIT_OUT_OF_MEMORY
  int64_t absorbed = 0;        ///< attempts whose injected failure still ended in SHAPEJIT_OK
  int64_t allocations = 0;     ///< operator new calls of the final, unfailed call
  std::string summary() const;
};

/// One attempt: the status of the call and what the injector saw during it.
struct Attempt {
  shapejit_status status = SHAPEJIT_OK;
  AllocCount count;
};

/// Runs attempt(k) for k = 1, 2, ... until an attempt in which no failure was injected (the
/// call made fewer than k allocations), at most max_k times; the attempt does its own checks.
template <class F>
SweepStats sweep_allocations(F&& attempt, int64_t max_k = 100000) {
  SweepStats s;
  for (int64_t k = 1; k <= max_k; ++k) {
    const Attempt a = attempt(k);
    ++s.attempts;
    if (!a.count.fired) {
      s.allocations = a.count.allocations;
      break;
    }
    if (a.status == SHAPEJIT_OUT_OF_MEMORY) ++s.out_of_memory;
    if (a.status == SHAPEJIT_OK) ++s.absorbed;
  }
  return s;
}

/// Byte pattern every output starts from: position-dependent, so neither a fill with one value
/// nor a shifted copy can reproduce it.
unsigned char sentinel_byte(size_t position);

}  // namespace shapejit::test::oom
