#include "common/log.h"

#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/format.h"

namespace trainsup {
namespace {

std::string& ProgramName() {
  static std::string* name = new std::string("trainsup");
  return *name;
}
std::atomic<bool> verbose{false};

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return 'D';
    case LogLevel::kInfo:
      return 'I';
    case LogLevel::kWarning:
      return 'W';
    case LogLevel::kError:
      return 'E';
  }
  return '?';
}

}  // namespace

void SetLogProgramName(absl::string_view name) { ProgramName() = std::string(name); }
void SetLogVerbose(bool on) { verbose = on; }

void LogLine(LogLevel level, absl::string_view text) {
  if (level == LogLevel::kDebug && !verbose) return;
  std::string line = absl::StrCat(
      Timestamp(absl::Now()), " ",
      std::string(1, LevelLetter(level)), " ", ProgramName(), ": ", text, "\n");
  // One write per line keeps lines from different threads whole.
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace trainsup
