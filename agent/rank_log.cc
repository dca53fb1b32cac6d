#include "agent/rank_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/str_split.h"

namespace trainsup {
namespace {

namespace fs = std::filesystem;

// The newest LOG_DIR/*/attempt_*/LOCAL_RANK/stderr.log; empty when none.
fs::path NewestLog(const fs::path& log_dir, const std::string& local_rank) {
  fs::path newest;
  fs::file_time_type newest_time;
  std::error_code error;
  for (const fs::directory_entry& run : fs::directory_iterator(log_dir, error)) {
    std::error_code inner;
    for (const fs::directory_entry& attempt : fs::directory_iterator(run.path(), inner)) {
      if (attempt.path().filename().string().rfind("attempt_", 0) != 0) continue;
      const fs::path log = attempt.path() / local_rank / "stderr.log";
      std::error_code stat;
      const fs::file_time_type time = fs::last_write_time(log, stat);
      if (stat || (!newest.empty() && time <= newest_time)) continue;
      newest = log;
      newest_time = time;
    }
  }
  return newest;
}

}  // namespace

std::deque<std::string> RankStderrLog(const std::string& log_dir, uint32_t local_rank,
                                      size_t max_bytes) {
  std::deque<std::string> lines;
  if (log_dir.empty()) return lines;
  const fs::path log = NewestLog(log_dir, std::to_string(local_rank));
  if (log.empty()) return lines;
  const int fd = open(log.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return lines;
  const off_t size = lseek(fd, 0, SEEK_END);
  const off_t from = size > static_cast<off_t>(max_bytes) ? size - static_cast<off_t>(max_bytes) : 0;
  std::string text(static_cast<size_t>(size - from), '\0');
  const ssize_t n = size > 0 ? pread(fd, text.data(), text.size(), from) : 0;
  close(fd);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  for (absl::string_view line : absl::StrSplit(text, '\n')) lines.emplace_back(line);
  if (from > 0 && !lines.empty()) lines.pop_front();  // cut in the middle
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

}  // namespace trainsup
