#ifndef TRAINSUP_CLI_RENDER_H_
#define TRAINSUP_CLI_RENDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "calc/checkpoint_planner.h"
#include "calc/compute_budget.h"
#include "google/protobuf/message.h"
#include "trainsup/v1/calculators.pb.h"
#include "trainsup/v1/operator.pb.h"

namespace trainsup {

// The JSON of `-o json`: Protobuf's JSON mapping with the proto field names
// and zero values printed, so that scripts never need to know the defaults,
// except that every number is a JSON number (64-bit ones too: Protobuf
// prints them as strings) and text is escaped only where JSON requires
// (no "\u003e" for '>'). An unset optional or message field is left out.
// Indented, ending with a newline.
std::string RenderJson(const google::protobuf::Message& message);

// The tables of `-o table`. `now` renders ages; times are shown as ages.
std::string RenderJobsTable(const v1::ListJobsResponse& response, absl::Time now);
// kP99: by compute p99 (the rank's own work; in a synchronous job every
// rank's wall step time is the same), then step p99.
// The ranks in the order the supervisor sorted them.
std::string RenderRanksTable(const v1::ListRanksResponse& response);
// One line on the whole job (the response's summary), and what the table
// leaves out: "showing the top 20 of 100000 by compute p99 (--all: every rank)".
std::string RenderRanksSummary(const v1::ListRanksResponse& response, const std::string& shown);
std::string RenderNodesTable(const v1::ListNodesResponse& response);
// `trainsupctl status`: who leads, since when (its age at `now`), the epoch,
// and the election's candidates in line.
std::string RenderSupervisorStatus(const v1::SupervisorStatus& status, absl::Time now);
// `trainsupctl kill-criteria list`: one row per criterion of each job.
std::string RenderKillCriteriaTable(const v1::ListKillCriteriaResponse& response);
std::string RenderEventsTable(const v1::ListEventsResponse& response);
// `trainsupctl stacks JOB`: the groups of ranks with the same Python stack,
// the smallest first, the culprit's marked.
std::string RenderStacks(const v1::StacksResponse& stacks);
// `trainsupctl job JOB`: state, MTBF, C, R, the plan, the goodput ledger.
std::string RenderJobDetail(const v1::JobDetail& detail);
// A job's training signals (its `signals` map) as "name value, ...", by
// name; with `nonzero_only`, those that are not 0 ("" when none is).
std::string SignalsText(const v1::Job& job, bool nonzero_only = false);
// The kinds of event trainsupd keeps, by their names ("stall", "crash",
// ...), in the table's order (common/event_kinds.cc): what `events --kind`
// accepts.
const std::vector<std::string>& EventKindNames();
// One event as a line: "TIME KIND JOB [rank R] [node N]: message".
std::string RenderEventLine(const v1::Event& event);
// One event as one line of JSON (for `events --follow -o json`).
std::string RenderJsonLine(const google::protobuf::Message& message);

// The one duration format: "45ms" below a second, "1.23s" below a minute,
// "27m13s", "24h11s" from a minute up; "-" for unknown (negative) values
// and NaN.
std::string FormatSeconds(double seconds);
// A measured time (a percentile of step or compute times): FormatSeconds,
// or "-" for 0, which the supervisor sends when nothing was measured yet.
std::string FormatMeasured(double seconds);
// "1.23s ago"; "-" for unknown (negative) ages.
std::string FormatAge(double seconds);
// A step for a table: "-" before the first (negative).
std::string FormatStep(int64_t step);
// The rules' verdicts on a rank as the FLAGS columns show them:
// STALL-CULPRIT, CRASHED-FIRST, STRAGGLER.
std::vector<std::string> RankVerdictFlags(const v1::Rank& rank);
// The FLAGS cell: the verdict flags, then how a dead rank's process ended
// ("exit code 1").
std::string RankFlags(const v1::Rank& rank);
// The rank columns, the same in `ranks` and `top` (docs/cli.md), and one
// rank's cells in that order.
const std::vector<std::string>& RankColumns();
std::vector<std::string> RankCells(const v1::Rank& rank);
// "alive 3, dead 1, unknown 0, finished 0": the summary's counts by liveness.
std::string RankCountsText(const v1::RankSummary& summary);

// ---- Offline calculators: `plan` and `budget` (no supervisor contacted) ----
// Each command is flags -> core inputs (InvalidArgument naming the flag for a
// bad value) -> the pure core -> text. `-o json` prints the result's message
// (calculators.proto) with RenderJson, like every other verb: keys carry the
// unit (_seconds, _fraction, ...); fractions are 0..1 (0.162 is 16.2 %); a
// figure that does not apply is an unset optional field, left out.

// The options of `trainsupctl plan`, in the units they are typed in.
struct PlanFlags {
  double mtbf_hours = 6;           // --mtbf-hours: M
  double checkpoint_seconds = 180; // --checkpoint-seconds: one writer's full write
  double restart_seconds = 720;    // --restart-seconds: R (failure -> next first step)
  int writers = 1;                 // --writers: the write takes checkpoint_seconds / writers
  // --async-snapshot-seconds: training blocks only this long; the write
  // (checkpoint_seconds / writers) goes on in the background.
  std::optional<double> async_snapshot_seconds;
  std::optional<double> run_hours;  // --run-hours: L
};
absl::StatusOr<CheckpointPlanInputs> PlanInputsFromFlags(const PlanFlags& flags);
std::string RenderCheckpointPlanTable(const PlanFlags& flags, const CheckpointPlan& plan);
v1::CheckpointPlanResult CheckpointPlanToProto(const PlanFlags& flags, const CheckpointPlan& plan);
// The whole command: its stdout, or the error for `error: ...` (exit 2).
absl::StatusOr<std::string> RunPlanCommand(const PlanFlags& flags, bool json);

// The options of `trainsupctl budget` are ComputeBudgetInputs (its defaults
// are the command's). The checks name the flags; --gpus and
// --price-per-gpu-hour need --useful-gpu-hours.
absl::Status CheckBudgetFlags(const ComputeBudgetInputs& flags);
std::string RenderComputeBudgetTable(const ComputeBudget& budget);
v1::ComputeBudgetResult ComputeBudgetToProto(const ComputeBudget& budget);
absl::StatusOr<std::string> RunBudgetCommand(const ComputeBudgetInputs& flags, bool json);

}  // namespace trainsup

#endif  // TRAINSUP_CLI_RENDER_H_
