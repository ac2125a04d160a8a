// Engine events that are not the kernel cache's own counters but belong in the same statistics
// (shapejit_kernel_cache_stats): today, linear groups that run the scalar reference.
#pragma once

#include <cstdint>
#include <string>

namespace shapejit::rt {

/// True when SHAPEJIT_VERBOSE=1: the engine then explains its choices on stderr.
bool verbose_requested();

/// Counts a linear group built to run the double-precision reference because no GEMM generator
/// takes its ISA or shape (`why`), and says so on stderr under SHAPEJIT_VERBOSE=1, once per
/// process (a model builds many groups; the first reason is the one to read).
void note_reference_linear_group(const std::string& why);

/// Linear groups built to run the reference so far in this process.
int64_t reference_linear_groups();

}  // namespace shapejit::rt
