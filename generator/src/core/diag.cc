// Diagnostics (see fk/gen/diag.h).
#include "fk/gen/diag.h"

namespace fk::gen {

std::string Diagnostics::text() const {
  std::string out;
  for (const auto& e : errors_) {
    out += e;
    out += '\n';
  }
  return out;
}

}  // namespace fk::gen
