#include "agent/nccl_dumps.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace trainsup {
namespace {

constexpr char kDumpFile[] = "/nccl-trace-rank-";
// Torch's default ring (2,000 entries): a few hundred kB of memory a rank.
constexpr char kBufferSize[] = "2000";

// The variable's value, or `fallback` when unset or empty.
std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> FlightRecorderEnv(const std::string& directory,
                                                                   IsSetFn is_set) {
  const std::string prefix = directory + kDumpFile;
  // Each name torch reads, with the value trainsup gives it; the older
  // TORCH_NCCL_* and the newer TORCH_FR_* names together.
  const std::pair<const char*, std::string> wanted[] = {
      {"TORCH_NCCL_TRACE_BUFFER_SIZE", kBufferSize},
      {"TORCH_FR_BUFFER_SIZE", kBufferSize},
      {"TORCH_NCCL_DUMP_ON_TIMEOUT", "1"},
      {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", prefix},
      {"TORCH_FR_DUMP_TEMP_FILE", prefix},
      {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE", prefix},
      {"TORCH_FR_DEBUG_INFO_PIPE_FILE", prefix},
  };
  std::vector<std::pair<std::string, std::string>> env;
  for (const auto& [name, value] : wanted) {
    if (!is_set(name)) env.emplace_back(name, value);
  }
  return env;
}

bool IsFlightRecorderPath(const std::string& name) {
  return name == "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" || name == "TORCH_FR_DUMP_TEMP_FILE" ||
         name == "TORCH_NCCL_DEBUG_INFO_PIPE_FILE" || name == "TORCH_FR_DEBUG_INFO_PIPE_FILE";
}

std::string NcclDumpPaths::DumpOf(uint32_t rank) const { return absl::StrCat(dump_prefix, rank); }

std::string NcclDumpPaths::PipeOf(uint32_t rank) const {
  return absl::StrCat(pipe_prefix, rank, ".pipe");
}

NcclDumpPaths NcclDumpPathsFor(const std::string& directory) {
  const std::string ours = directory + kDumpFile;
  NcclDumpPaths paths;
  paths.dump_prefix = EnvOr("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", EnvOr("TORCH_FR_DUMP_TEMP_FILE", ours));
  paths.pipe_prefix =
      EnvOr("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", EnvOr("TORCH_FR_DEBUG_INFO_PIPE_FILE", ours));
  return paths;
}

bool AskForNcclDump(const NcclDumpPaths& paths, uint32_t rank) {
  // O_NONBLOCK: a pipe nobody reads fails at once (ENXIO) instead of
  // blocking the agent's loop; a regular file of that name is not a pipe.
  const std::string pipe = paths.PipeOf(rank);
  struct stat st;
  if (stat(pipe.c_str(), &st) != 0 || !S_ISFIFO(st.st_mode)) return false;
  const int fd = open(pipe.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  const bool written = write(fd, "1", 1) == 1;
  close(fd);
  return written;
}

int64_t ModifiedNanos(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace trainsup
