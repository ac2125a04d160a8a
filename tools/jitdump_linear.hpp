// `jitdump linear-group`: the generated linear-group (GEMM) microkernel of one key.
#pragma once

#include <CLI/CLI.hpp>

#include "tools/jitdump_common.hpp"

namespace shapejit::tools {

/// Registers `linear-group` on `parent`; the returned action prints the microkernel's summary
/// and listing, throws UsageError for bad flag combinations and shapejit::Error when
/// generation fails.
Command add_linear_group_command(CLI::App& parent);

}  // namespace shapejit::tools
