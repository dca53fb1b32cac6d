#include "cli/render.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/table.h"
#include "google/protobuf/util/json_util.h"

namespace trainsup {

std::string RenderJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.add_whitespace = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

std::string RenderJsonLine(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out + "\n";
}

std::string FormatSeconds(double seconds) {
  if (!(seconds >= 0)) return "-";  // unknown (negative) or NaN
  // Choose the unit after rounding, so that 0.9996 reads 1.00s, not 1000ms.
  if (std::round(seconds * 1000) < 1000) return absl::StrFormat("%.0fms", seconds * 1000);
  if (std::round(seconds * 100) < 10000) return absl::StrFormat("%.2fs", seconds);
  return absl::StrFormat("%.0fs", seconds);
}

std::string FormatAge(double seconds) {
  return seconds >= 0 ? FormatSeconds(seconds) + " ago" : "-";
}

namespace {

std::string Step(int64_t step) { return step < 0 ? "-" : absl::StrCat(step); }

}  // namespace

std::string RenderJobsTable(const v1::ListJobsResponse& response, absl::Time now) {
  Table table({"JOB", "GEN", "STATE", "RANKS", "ALIVE", "NODES", "STEP", "STEP_P50", "STEP_P99",
               "LAST_PROGRESS", "STRAGGLERS", "RESTARTS", "HEARTBEATS"});
  for (const v1::Job& job : response.jobs()) {
    std::string progress = "-";
    if (job.has_last_progress_time()) {
      absl::Time t = absl::FromUnixSeconds(job.last_progress_time().seconds()) +
                     absl::Nanoseconds(job.last_progress_time().nanos());
      progress = FormatAge(absl::ToDoubleSeconds(now - t));
    }
    table.AddRow({job.job_id(), absl::StrCat(job.generation()),
                  job.state() + (job.stalled() ? ",STALLED" : ""),
                  absl::StrCat(job.ranks_reporting(), "/", job.world_size()),
                  absl::StrCat(job.ranks_alive()), absl::StrCat(job.nodes()), Step(job.step()),
                  FormatSeconds(job.step_p50_seconds()), FormatSeconds(job.step_p99_seconds()),
                  progress, absl::StrCat(job.stragglers()), absl::StrCat(job.restarts()),
                  absl::StrCat(job.heartbeats_received())});
  }
  return table.Render();
}

std::string RenderRanksTable(const v1::ListRanksResponse& response, RankSort sort) {
  std::vector<const v1::Rank*> ranks;
  for (const v1::Rank& r : response.ranks()) ranks.push_back(&r);
  if (sort == RankSort::kP99) {
    std::stable_sort(ranks.begin(), ranks.end(), [](const v1::Rank* a, const v1::Rank* b) {
      return a->step_p99_seconds() > b->step_p99_seconds();
    });
  }
  Table table({"RANK", "NODE", "PID", "STEP", "PHASE", "STEP_P50", "STEP_P99", "COMPUTE_P99",
               "LAST_SEEN", "ALIVE", "LOSS", "FLAGS"});
  for (const v1::Rank* r : ranks) {
    std::vector<std::string> flags;
    if (r->stall_culprit()) flags.push_back("STALL-CULPRIT");
    if (r->crash_culprit()) flags.push_back("CRASHED-FIRST");
    if (r->straggler()) flags.push_back("STRAGGLER");
    if (!r->exit().empty()) flags.push_back(r->exit());
    std::string alive = r->alive() ? "yes" : "no";
    table.AddRow({absl::StrCat(r->rank()), r->node(), absl::StrCat(r->pid()), Step(r->step()),
                  r->phase(), FormatSeconds(r->step_p50_seconds()),
                  FormatSeconds(r->step_p99_seconds()),
                  r->compute_p99_seconds() > 0 ? FormatSeconds(r->compute_p99_seconds()) : "-",
                  FormatAge(r->last_heartbeat_age_seconds()), alive,
                  r->has_loss() ? absl::StrFormat("%.4g", r->loss()) : "-",
                  flags.empty() ? "" : absl::StrJoin(flags, ",")});
  }
  return table.Render();
}

std::string RenderNodesTable(const v1::ListNodesResponse& response) {
  Table table({"NODE", "JOB", "GEN", "CONNECTED", "COMMAND", "RANKS", "LAST_REPORT", "HEARTBEATS",
               "QUARANTINE"});
  for (const v1::Node& n : response.nodes()) {
    table.AddRow({n.node(), n.job_id(), absl::StrCat(n.generation()), n.connected() ? "yes" : "no",
                  n.launcher_state(), absl::StrCat(n.ranks()),
                  FormatAge(n.last_report_age_seconds()), absl::StrCat(n.heartbeats_received()),
                  n.quarantined() ? "QUARANTINED: " + n.quarantine_reason() : "-"});
  }
  return table.Render();
}

namespace {

std::string EventTime(const v1::Event& e) {
  absl::Time t = absl::FromUnixSeconds(e.time().seconds()) + absl::Nanoseconds(e.time().nanos());
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

}  // namespace

std::string RenderEventLine(const v1::Event& e) {
  std::string where;
  if (e.has_rank()) absl::StrAppend(&where, " rank ", e.rank());
  if (!e.node().empty()) absl::StrAppend(&where, " node ", e.node());
  return absl::StrCat(EventTime(e), " ", e.kind(), " ", e.job_id(), "#", e.generation(), where,
                      ": ", e.message(), "\n");
}

std::string RenderEventsTable(const v1::ListEventsResponse& response) {
  Table table({"ID", "TIME", "KIND", "JOB", "GEN", "RANK", "NODE", "MESSAGE"});
  for (const v1::Event& e : response.events()) {
    table.AddRow({absl::StrCat(e.id()), EventTime(e), e.kind(), e.job_id(),
                  absl::StrCat(e.generation()), e.has_rank() ? absl::StrCat(e.rank()) : "-",
                  e.node().empty() ? "-" : e.node(), e.message()});
  }
  return table.Render();
}

}  // namespace trainsup
