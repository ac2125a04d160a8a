// See dtype_traits.hpp.
#include "jit/dtype_traits.hpp"

namespace shapejit::jit {

std::string dtype_set_text(DtypeSet set) {
  std::string s, last;
  for (const DtypeTraits& d : kDtypeTraits) {
    if (!set.contains(d.dtype)) continue;
    if (!last.empty()) s += s.empty() ? last : ", " + last;
    last = d.name;
  }
  return s.empty() ? last : s + " or " + last;
}

}  // namespace shapejit::jit
