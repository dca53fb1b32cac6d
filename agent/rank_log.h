#ifndef TRAINSUP_AGENT_RANK_LOG_H_
#define TRAINSUP_AGENT_RANK_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

namespace trainsup {

// torch 1.13's torchrun, with --redirects, writes each rank's stderr to a
// file under its log directory:
//
//     LOG_DIR/RUN_ID_XXXXXXXX/attempt_N/LOCAL_RANK/stderr.log
//
// (LOG_DIR: its --log_dir, else a fresh /tmp/torchelastic_XXXXXXXX), and
// with --tee also copies each line into its own stderr as
// "[default3]:line". Without --tee the file is the only copy.

// The last lines of the newest stderr.log of local rank `local_rank` under
// `log_dir` (at most `max_bytes` from its end, the first partial line
// dropped), oldest first; empty when there is none.
std::deque<std::string> RankStderrLog(const std::string& log_dir, uint32_t local_rank,
                                      size_t max_bytes = 16 << 10);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_RANK_LOG_H_
