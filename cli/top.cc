#include "cli/top.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/render.h"
#include "cli/table.h"
#include "common/format.h"

namespace trainsup {

int TopRankRows(TerminalSize size) { return std::max(0, size.rows - kTopHeaderLines); }

void StepRate::Add(uint64_t generation, int64_t step, absl::Time now) {
  if (generation != generation_ || (!samples_.empty() && step < samples_.back().step)) {
    generation_ = generation;
    samples_.clear();
  }
  if (step < 0) return;  // no step yet: nothing to measure from
  samples_.push_back({step, now});
  while (samples_.size() > 2 && now - samples_[1].time >= window_) samples_.pop_front();
}

std::optional<double> StepRate::PerSecond() const {
  if (samples_.size() < 2) return std::nullopt;
  const absl::Duration span = samples_.back().time - samples_.front().time;
  if (span < absl::Milliseconds(500)) return std::nullopt;
  return (samples_.back().step - samples_.front().step) / absl::ToDoubleSeconds(span);
}

std::optional<double> StepsPerSecondOfStepTimes(const v1::Job& job) {
  if (job.state() != "running" || job.stalled() || !(job.step_p50_seconds() > 0)) {
    return std::nullopt;
  }
  return 1 / job.step_p50_seconds();
}

std::string FitLine(const std::string& text, int cols) {
  std::string out;
  int shown = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const bool continuation = (c & 0xC0) == 0x80;
    if (!continuation && shown++ >= cols) break;
    out.push_back(c < 0x20 || c == 0x7F ? ' ' : static_cast<char>(c));
  }
  return out;
}

namespace {

// Why the job line has no job yet.
std::string Waiting(const TopData& data) {
  if (data.job_id.empty() && data.error.code() == absl::StatusCode::kNotFound) {
    return "(waiting for a job: the supervisor knows none yet)";
  }
  if (data.error.code() == absl::StatusCode::kNotFound) {
    return "(waiting for the job: the supervisor does not know it yet)";
  }
  if (data.error.ok() || data.error.code() == absl::StatusCode::kUnavailable ||
      data.error.code() == absl::StatusCode::kDeadlineExceeded) {
    return "(waiting for the supervisor)";
  }
  return "";  // the status line says what went wrong
}

std::string JobLine(const TopData& data, absl::Time now) {
  std::string line = absl::StrCat("job ", data.job_id.empty() ? "-" : data.job_id);
  if (!data.detail.has_value()) {
    const std::string waiting = Waiting(data);
    return waiting.empty() ? line : absl::StrCat(line, "   ", waiting);
  }
  const v1::Job& job = data.detail->job();
  const v1::LedgerBuckets& ledger = data.detail->ledger();
  // The last step's age, not the read's: during a hang it grows.
  std::string last_step = "-";
  if (job.has_last_progress_time()) {
    const absl::Time at = absl::FromUnixSeconds(job.last_progress_time().seconds()) +
                          absl::Nanoseconds(job.last_progress_time().nanos());
    last_step = FormatAge(absl::ToDoubleSeconds(now - at));
  }
  absl::StrAppend(&line, "   ", job.state(), job.stalled() ? " STALLED" : "", "   generation ",
                  job.generation(), "   step ", FormatStep(job.step()), "   last step ",
                  last_step, "   ",
                  data.steps_per_second.has_value()
                      ? absl::StrFormat("%.2f steps/s", *data.steps_per_second)
                      : std::string("- steps/s"),
                  "   goodput ",
                  ledger.wall_seconds() > 0 ? Percent(ledger.goodput_fraction()) : "-");
  if (!job.state_reason().empty()) absl::StrAppend(&line, "   (", job.state_reason(), ")");
  return line;
}

std::string RanksLine(const TopData& data) {
  if (!data.ranks.has_value()) return "ranks: -";
  const v1::ListRanksResponse& r = *data.ranks;
  const v1::RankSummary& s = r.summary();
  std::string line = absl::StrFormat("ranks %d/%d heard: %s   stragglers %d   steps %s..%s",
                                     s.ranks(), r.world_size(), RankCountsText(s),
                                     s.stragglers(), FormatStep(s.min_step()),
                                     FormatStep(s.max_step()));
  if (s.compute_p99_max_seconds() > 0) {
    absl::StrAppend(&line, "   compute p99 median ", FormatSeconds(s.compute_p99_median_seconds()),
                    " max ", FormatSeconds(s.compute_p99_max_seconds()));
  }
  return line;
}

// The job's training signals that are not 0 (a flag raised, a figure
// measured), by name: on one line, the zeros of a healthy job would push out
// what matters. `job` shows them all.
std::string SignalsLine(const TopData& data) {
  if (!data.detail.has_value() || data.detail->job().signals_size() == 0) return "signals: -";
  const std::string nonzero = SignalsText(data.detail->job(), /*nonzero_only=*/true);
  return nonzero.empty() ? "signals: all 0" : "signals: " + nonzero;
}

std::string EventLine(const TopData& data) {
  if (!data.last_event.has_value()) return "last event: none";
  std::string line = RenderEventLine(*data.last_event);
  if (!line.empty() && line.back() == '\n') line.pop_back();
  return "last event: " + line;
}

std::string StatusLine(const TopData& data, int rows_shown, absl::Time now) {
  if (!data.error.ok()) {
    const absl::StatusCode code = data.error.code();
    const bool unreachable =
        code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded;
    if (code == absl::StatusCode::kNotFound) return std::string(data.error.message());
    std::string stale;
    if (data.detail.has_value()) {
      stale = absl::StrCat(" (showing its answers of ",
                           FormatAge(absl::ToDoubleSeconds(now - data.read_at)), ")");
    }
    return absl::StrCat(unreachable ? "supervisor unreachable" : "error", stale, ": ",
                        data.error.message());
  }
  if (!data.ranks.has_value()) return "";
  return absl::StrCat("the ", rows_shown, " slowest of ", data.ranks->matched(),
                      " ranks by compute p99");
}

}  // namespace

// The rank columns a narrow terminal leaves out, least important first
// (indexes into RankColumns()): RANK and FLAGS stay.
const std::vector<size_t> kTopDropOrder = {10 /* LOSS */,     2 /* PID */,
                                           6 /* STEP_P50 */,  4 /* PHASE */,
                                           1 /* NODE */,      7 /* STEP_P99 */,
                                           8 /* LAST_SEEN */, 3 /* STEP */,
                                           9 /* LIVENESS */,  5 /* COMPUTE_P99 */};

std::vector<std::string> RenderTopScreen(const TopData& data, TerminalSize size, absl::Time now) {
  const int room = TopRankRows(size);
  int rows_shown = 0;
  Table table(RankColumns());
  if (data.ranks.has_value()) {
    rows_shown = std::min(room, data.ranks->ranks_size());
    for (int i = 0; i < rows_shown; ++i) table.AddRow(RankCells(data.ranks->ranks(i)));
  }
  std::vector<std::string> lines = {JobLine(data, now), RanksLine(data), SignalsLine(data),
                                    EventLine(data),
                                    StatusLine(data, rows_shown, now)};
  const std::string rendered =
      table.RenderWithin(static_cast<size_t>(std::max(0, size.cols)), kTopDropOrder);
  for (absl::string_view row : absl::StrSplit(rendered, '\n', absl::SkipEmpty())) {
    lines.emplace_back(row);
  }
  if (static_cast<int>(lines.size()) > size.rows) lines.resize(std::max(0, size.rows));
  for (std::string& line : lines) line = FitLine(line, size.cols);
  return lines;
}

absl::Status TopView::PickJob() {
  absl::StatusOr<v1::ListJobsResponse> jobs = client_->ListJobs();
  if (!jobs.ok()) return jobs.status();
  if (jobs->jobs_size() == 0) return absl::NotFoundError("the supervisor knows no job yet");
  if (jobs->jobs_size() > 1) {
    std::vector<std::string> names;
    for (const v1::Job& job : jobs->jobs()) names.push_back(job.job_id());
    return absl::FailedPreconditionError(
        absl::StrFormat("the supervisor knows %d jobs (%s): say which, trainsupctl top JOB",
                        jobs->jobs_size(), absl::StrJoin(names, ", ")));
  }
  data_.job_id = jobs->jobs(0).job_id();
  return absl::OkStatus();
}

void TopView::Refresh(int rank_rows, absl::Time now) {
  if (data_.job_id.empty()) {
    data_.error = PickJob();
    if (!data_.error.ok()) return;
  }
  absl::StatusOr<v1::JobDetail> detail = client_->GetJob(data_.job_id);
  if (!detail.ok()) {
    data_.error = detail.status();
    return;
  }
  v1::ListRanksRequest request;
  request.set_job_id(data_.job_id);
  request.set_sort(v1::RANK_SORT_COMPUTE_P99);
  // The summary line needs an answer even when no row fits (0 means "all").
  request.set_limit(static_cast<uint32_t>(std::max(rank_rows, 1)));
  absl::StatusOr<v1::ListRanksResponse> ranks = client_->ListRanks(request);
  if (!ranks.ok()) {
    data_.error = ranks.status();
    return;
  }
  // Only the events since the last refresh; the first asks for every kept one.
  absl::StatusOr<v1::ListEventsResponse> events = client_->ListEvents(data_.job_id, last_event_id_);
  if (!events.ok()) {
    data_.error = events.status();
    return;
  }
  if (events->events_size() > 0) {
    data_.last_event = events->events(events->events_size() - 1);
    last_event_id_ = data_.last_event->id();
  }
  rate_.Add(detail->job().generation(), detail->job().step(), now);
  data_.steps_per_second = rate_.PerSecond();
  if (!data_.steps_per_second) data_.steps_per_second = StepsPerSecondOfStepTimes(detail->job());
  data_.detail = *std::move(detail);
  data_.ranks = *std::move(ranks);
  data_.read_at = now;
  data_.error = absl::OkStatus();
}

}  // namespace trainsup
