#ifndef TRAINSUP_COMMON_LOG_H_
#define TRAINSUP_COMMON_LOG_H_

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace trainsup {

// One line per call on stderr: "2026-11-29T11:04:09.123Z I trainsupd: text".
// Thread-safe (one write(2) per line).
enum class LogLevel { kDebug, kInfo, kWarning, kError };

void SetLogProgramName(absl::string_view name);
void SetLogVerbose(bool verbose);  // Default: false (debug lines are dropped).
void LogLine(LogLevel level, absl::string_view text);

template <typename... Args>
void Log(LogLevel level, const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(level, absl::StrFormat(format, args...));
}

#define TRAINSUP_LOG_INFO(...) ::trainsup::Log(::trainsup::LogLevel::kInfo, __VA_ARGS__)
#define TRAINSUP_LOG_WARN(...) ::trainsup::Log(::trainsup::LogLevel::kWarning, __VA_ARGS__)
#define TRAINSUP_LOG_ERROR(...) ::trainsup::Log(::trainsup::LogLevel::kError, __VA_ARGS__)
#define TRAINSUP_LOG_DEBUG(...) ::trainsup::Log(::trainsup::LogLevel::kDebug, __VA_ARGS__)

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_LOG_H_
