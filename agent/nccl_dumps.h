#ifndef TRAINSUP_AGENT_NCCL_DUMPS_H_
#define TRAINSUP_AGENT_NCCL_DUMPS_H_

// Where the ranks' NCCL flight recorders write, and how the agent asks them
// for a dump on a stall (docs/gpu.md, "NCCL's flight recorder"). PyTorch's
// ProcessGroupNCCL records its last collectives when
// TORCH_NCCL_TRACE_BUFFER_SIZE > 0; it writes them to
// TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank on a watchdog timeout
// (TORCH_NCCL_DUMP_ON_TIMEOUT), and on demand when a byte is written to the
// named pipe TORCH_NCCL_DEBUG_INFO_PIPE_FILE + rank + ".pipe" that it makes
// and polls. torch 2.6 and later also read the TORCH_FR_* names.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace trainsup {

// The flight recorder's variables for the ranks the agent launches: those
// the user did not set (in `is_set`'s view of the agent's environment),
// with the dumps and pipes under `directory`. A user who set the buffer
// size (to 0, say) keeps theirs, and so for each variable.
using IsSetFn = bool (*)(const char* name);
std::vector<std::pair<std::string, std::string>> FlightRecorderEnv(const std::string& directory,
                                                                   IsSetFn is_set);

// Whether `name` is one of the recorder's path variables (the dump's or the
// pipe's prefix): the agent's plumbing rather than the job's setting.
bool IsFlightRecorderPath(const std::string& name);

// Where the ranks' dumps and pipes are: the user's prefixes when set, else
// under `directory`.
struct NcclDumpPaths {
  std::string dump_prefix;  // + rank: the dump
  std::string pipe_prefix;  // + rank + ".pipe": the pipe that asks for one
  std::string DumpOf(uint32_t rank) const;
  std::string PipeOf(uint32_t rank) const;
};
NcclDumpPaths NcclDumpPathsFor(const std::string& directory);

// Writes one byte to `rank`'s pipe without blocking: true when a process
// reads it (its watchdog will dump), false when none does (no such pipe, or
// no NCCL group in that rank).
bool AskForNcclDump(const NcclDumpPaths& paths, uint32_t rank);

// A file's modification time in nanoseconds; 0 when it is missing.
int64_t ModifiedNanos(const std::string& path);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_NCCL_DUMPS_H_
