#include "daemon/core/early_failure.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/failure_text.h"
#include "common/format.h"
#include "daemon/core/failure_classifier.h"

namespace trainsup {
namespace {

// The most of the command's lines a hold reason quotes.
constexpr size_t kMaxQuotedBytes = 1024;

// "Traceback (most recent call last): | File \"train.py\", line 3 | ...":
// the lines as one, without torchrun's prefixes and indentation.
std::string Quoted(const std::vector<std::string>& lines) {
  std::vector<absl::string_view> texts;
  for (const std::string& line : lines) {
    texts.push_back(absl::StripAsciiWhitespace(SplitLauncherLine(line).text));
  }
  return ClipText(absl::StrJoin(texts, " | "), kMaxQuotedBytes);
}

std::string LastLines(const EarlyFailure& f) {
  if (f.lines.empty()) return absl::StrCat("it wrote nothing to stderr (", f.signature, ")");
  return absl::StrCat("its last stderr lines: ", Quoted(f.lines));
}

}  // namespace

std::optional<EarlyFailure> EarlyFailureOf(const Job& job, NodeIndex node,
                                           const LauncherInfo& launcher) {
  if (!launcher.failed()) return std::nullopt;
  for (uint32_t rank : job.RanksOn(node)) {
    if (job.rank(rank).seen) return std::nullopt;  // a rank reported: not early
  }
  EarlyFailure f;
  f.node = node;
  const std::vector<std::string>& lines = launcher.stderr_lines;
  const size_t first = lines.size() > kMaxStderrExcerptLines ? lines.size() - kMaxStderrExcerptLines
                                                              : 0;
  for (size_t i = first; i < lines.size(); ++i) {
    f.lines.push_back(OutputLine(lines[i], kMaxStderrLineBytes));
  }
  if (!f.lines.empty()) {
    f.cause = std::string(absl::StripAsciiWhitespace(SplitLauncherLine(f.lines.back()).text));
  }
  f.signature = f.cause.empty() ? ExitStatusText(true, launcher.exit_code, launcher.signal)
                                : NormalizeMessage(f.cause);
  f.infrastructure = HasInfrastructureMarker(f.cause);
  f.crash_signal = IsCrashSignal(launcher.signal);
  return f;
}

EarlyJudgement JudgeEarlyFailure(uint64_t generation, const EarlyFailure& named,
                                 const std::vector<EarlyFailure>& early,
                                 const std::vector<std::string>& names, size_t ran,
                                 const std::optional<EarlyFailureMemory>& earlier) {
  EarlyJudgement j;
  const bool everywhere =
      ran >= 2 && early.size() >= ran &&
      std::all_of(early.begin(), early.end(),
                  [&](const EarlyFailure& f) { return f.signature == named.signature; });
  if (everywhere) {
    j.kind = EarlyJudgement::Kind::kWorkload;
    j.reason = absl::StrCat("the command failed before any rank reported, the same way on all ",
                            early.size(), " nodes (", ListSome(names),
                            "): the workload's failure, not a node's; ", LastLines(named));
    return j;
  }
  if (named.infrastructure || named.crash_signal) {
    j.kind = EarlyJudgement::Kind::kNode;
    return j;
  }
  if (earlier && earlier->generation < generation && earlier->signature == named.signature) {
    j.kind = EarlyJudgement::Kind::kWorkload;
    j.reason = absl::StrCat("the command failed before any rank reported, the same way in "
                            "generations ", earlier->generation, " and ", generation,
                            ": the workload's failure, not a node's; ", LastLines(named));
    return j;
  }
  j.kind = EarlyJudgement::Kind::kFirst;
  return j;
}

}  // namespace trainsup
