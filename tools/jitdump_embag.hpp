// `jitdump embedding-bag`: the generated embedding-bag kernel of one key, with its listing.
#pragma once

#include <CLI/CLI.hpp>

#include "tools/jitdump_common.hpp"

namespace shapejit::tools {

/// Registers `embedding-bag` on `parent`; the returned action prints the kernel's summary and
/// listing, throws UsageError for contradictory flags and shapejit::Error when generation fails.
Command add_embedding_bag_command(CLI::App& parent);

}  // namespace shapejit::tools
