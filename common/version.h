#ifndef TRAINSUP_COMMON_VERSION_H_
#define TRAINSUP_COMMON_VERSION_H_

#include <string>

#include "absl/strings/string_view.h"

namespace trainsup {

// The commit the binary was built from: `git describe --always --dirty` at
// build time ("6eeeca0", "6eeeca0-dirty"), or "unknown" when the sources were
// not a git checkout. Defined in a file the build generates.
const char* BuildCommit();

// What `BINARY --version` prints: "trainsupd 0.1.0 (commit 6eeeca0-dirty)".
std::string VersionLine(absl::string_view binary);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_VERSION_H_
