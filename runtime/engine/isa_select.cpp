#include "runtime/engine/isa_select.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "runtime/engine/engine_stats.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

using jit::Isa;

// Candidates of the host's family, best first; scalar (the generic C++ kernel) always closes the
// list (jit/isa.hpp's table).
std::vector<Isa> candidates(const HostFeatures& host) {
  return jit::isa_candidates(host.x86 ? jit::IsaFamily::kX86 : host.arm ? jit::IsaFamily::kA64 : jit::IsaFamily::kPortable);
}

bool in_family(const HostFeatures& host, Isa isa) {
  for (Isa c : candidates(host))
    if (c == isa) return true;
  return false;
}

// Rank within a family: candidates() is ordered best first, so a larger rank is less capable.
int rank(const HostFeatures& host, Isa isa) {
  const std::vector<Isa> list = candidates(host);
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i] == isa) return static_cast<int>(i);
  return static_cast<int>(list.size());
}

// No pin: -1; otherwise the pinned Isa's integer value.
std::atomic<int> g_override{-1};

}  // namespace

HostFeatures detect_host_features() { return jit::host_features(); }

std::string IsaSelection::to_string() const {
  std::string s = "isa ";
  s += jit::isa_name(isa);
  s += " (";
  for (size_t i = 0; i < reasons.size(); ++i) s += (i ? "; " : "") + reasons[i];
  s += ")";
  if (!cap_note.empty()) s += "; " + cap_note;
  return s;
}

IsaSelection select_isa(const HostFeatures& host, std::optional<std::string_view> cap_text) {
  IsaSelection sel;
  // A plain flag rather than optional<Isa>: g++ 12 warns (falsely) that the optional's
  // payload may be read uninitialised.
  bool capped = false;
  Isa cap = Isa::kScalar;
  if (cap_text && !cap_text->empty()) {
    const std::string shown = "SHAPEJIT_ISA=" + std::string(*cap_text);
    if (const std::optional<Isa> parsed = jit::parse_isa(*cap_text); !parsed) {
      sel.cap_note = shown + " is not one of avx512|avx2|neon|scalar; ignored";
    } else if (!in_family(host, *parsed)) {
      sel.cap_note = shown + " names an ISA of another CPU family than this host's; ignored";
    } else {
      capped = true;
      cap = *parsed;
    }
  }
  for (Isa c : candidates(host)) {
    const std::string name(jit::isa_name(c));
    if (capped && rank(host, c) < rank(host, cap)) {
      sel.reasons.push_back(name + ": capped by SHAPEJIT_ISA=" + std::string(jit::isa_name(cap)));
      continue;
    }
    if (std::string why = isa_unsupported_reason(host, c); !why.empty()) {
      sel.reasons.push_back(name + ": " + why);
      continue;
    }
    sel.isa = c;
    sel.reasons.push_back(name + ": selected");
    break;
  }
  return sel;
}

const IsaSelection& process_isa_selection() {
  static const IsaSelection selection = [] {
    const char* cap = std::getenv("SHAPEJIT_ISA");
    IsaSelection s = select_isa(detect_host_features(),
                                cap ? std::optional<std::string_view>(cap) : std::nullopt);
    if (!s.cap_note.empty()) std::fprintf(stderr, "shapejit: %s\n", s.cap_note.c_str());
    if (verbose_requested())
      std::fprintf(stderr, "shapejit: ISA selection: %s\n", s.to_string().c_str());
    return s;
  }();
  return selection;
}

Isa selected_isa() {
  const int pinned = g_override.load(std::memory_order_acquire);
  return pinned >= 0 ? static_cast<Isa>(pinned) : process_isa_selection().isa;
}

bool host_supports(Isa isa) { return jit::host_runs(isa); }

ScopedIsaOverride::ScopedIsaOverride(Isa isa) {
  if (!host_supports(isa)) {
    throw Error(Status::kUnsupported,
                "ScopedIsaOverride: isa " + std::string(jit::isa_name(isa)) + " cannot run here (" +
                    isa_unsupported_reason(detect_host_features(), isa) + ")");
  }
  previous_ = g_override.exchange(static_cast<int>(isa), std::memory_order_acq_rel);
}

ScopedIsaOverride::~ScopedIsaOverride() { g_override.store(previous_, std::memory_order_release); }

}  // namespace shapejit::rt
