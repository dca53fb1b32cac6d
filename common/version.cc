#include "common/version.h"

#include "absl/strings/str_cat.h"

namespace trainsup {

std::string VersionLine(absl::string_view binary) {
  return absl::StrCat(binary, " ", TRAINSUP_VERSION, " (commit ", BuildCommit(), ")");
}

}  // namespace trainsup
