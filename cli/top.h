#ifndef TRAINSUP_CLI_TOP_H_
#define TRAINSUP_CLI_TOP_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cli/client.h"
#include "trainsup/v1/operator.pb.h"

namespace trainsup {

// `trainsupctl top [JOB]`: a live view of one job, like top(1). The screen is
// a pure function of what was read and the terminal's size (RenderTopScreen,
// unit-tested); TopView reads; RunTop owns the terminal.

struct TerminalSize {
  int rows = 24;
  int cols = 80;
};

// The lines above the rank rows: the job line, the ranks summary, the
// training signals, the last event, the status line (an error, or the keys)
// and the table's header.
inline constexpr int kTopHeaderLines = 6;

// How many rank rows fit below the header (0 when none do): what top asks
// the supervisor for, so that a 100,000-rank job costs a screenful.
int TopRankRows(TerminalSize size);

// Steps per second of a job, measured like top measures CPU: the step
// counter's advance over the last `window` of samples. A new generation
// starts over (its step counter restarts from the checkpoint).
class StepRate {
 public:
  explicit StepRate(absl::Duration window = absl::Seconds(10)) : window_(window) {}

  // The job's highest completed step (-1: none yet) at `now`.
  void Add(uint64_t generation, int64_t step, absl::Time now);
  // Unknown until two samples of this generation, at least 500 ms apart.
  std::optional<double> PerSecond() const;

 private:
  struct Sample {
    int64_t step;
    absl::Time time;
  };
  const absl::Duration window_;
  uint64_t generation_ = 0;
  std::deque<Sample> samples_;
};

// Steps per second from the job's recent step times alone, for a view that
// has read once (not a terminal: its one frame; a terminal: until StepRate
// has two samples): a synchronous job steps at its ranks' step time, the
// median rank's p50 over its last steps. nullopt unless it steps now
// (running, not stalled) and has a step time.
std::optional<double> StepsPerSecondOfStepTimes(const v1::Job& job);

// What the view shows: the last answers read (kept while the supervisor is
// away, so that the screen goes stale rather than blank) and what went wrong
// on the last attempt.
struct TopData {
  std::string job_id;
  std::optional<v1::JobDetail> detail;         // state, generation, step, goodput
  std::optional<v1::ListRanksResponse> ranks;  // by compute p99, TopRankRows of them
  std::optional<v1::Event> last_event;
  std::optional<double> steps_per_second;
  absl::Time read_at = absl::InfinitePast();  // when the answers above were read
  absl::Status error;                         // the last refresh's, OK if it worked
};

// The screen: at most size.rows lines, none wider than size.cols characters
// (a narrow terminal loses the least important rank columns first: LOSS,
// PID, STEP_P50, PHASE, NODE, ...; RANK and FLAGS stay). `now` renders ages.
// The job line shows the age of the job's last step, so that a hang reads as
// one.
std::vector<std::string> RenderTopScreen(const TopData& data, TerminalSize size, absl::Time now);

// `text` cut to at most `cols` characters (UTF-8 code points), control
// characters shown as spaces: one terminal line.
std::string FitLine(const std::string& text, int cols);

// Reads what the view shows: the job, the slowest ranks by compute p99 (only
// as many as fit), and events since the last refresh (the newest kept).
class TopView {
 public:
  TopView(OperatorClient* client, std::string job_id) : client_(client) {
    data_.job_id = std::move(job_id);
  }

  // One refresh for a screen of `rank_rows` rank rows. A failed call keeps
  // the previous answers and sets data().error. Without a job id it first
  // picks the only job the supervisor knows (NOT_FOUND while it knows none,
  // FAILED_PRECONDITION when it knows several).
  void Refresh(int rank_rows, absl::Time now);
  const TopData& data() const { return data_; }

 private:
  absl::Status PickJob();

  OperatorClient* client_;
  TopData data_;
  StepRate rate_;
  uint64_t last_event_id_ = 0;
};

// The whole verb. On a terminal: the live view until q, Ctrl-C, SIGTERM or
// SIGHUP, refreshed every second, the terminal restored however it ends; it
// waits for the supervisor, for the job (for a job, without `job_id`, then
// takes the only one). Otherwise: one frame, then exit (without `job_id`:
// the only job, else exit 4 for none and 2 for several). Returns the exit
// code.
int RunTop(OperatorClient& client, std::string job_id);

}  // namespace trainsup

#endif  // TRAINSUP_CLI_TOP_H_
