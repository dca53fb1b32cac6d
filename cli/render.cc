#include "cli/render.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

std::string FormatSeconds(double seconds) {
  if (seconds < 0) return "-";
  if (seconds < 1) return absl::StrFormat("%.0fms", seconds * 1000);
  if (seconds < 100) return absl::StrFormat("%.2fs", seconds);
  return absl::StrFormat("%.0fs", seconds);
}

namespace {

std::string Step(int64_t step) { return step < 0 ? "-" : absl::StrCat(step); }

}  // namespace

std::string RenderJobsTable(const v1::ListJobsResponse& response, absl::Time now) {
  Table table({"JOB", "GEN", "RANKS", "ALIVE", "NODES", "STEP", "STEP_P50", "STEP_P99",
               "LAST_PROGRESS", "HEARTBEATS"});
  for (const v1::Job& job : response.jobs()) {
    std::string progress = "-";
    if (job.has_last_progress_time()) {
      absl::Time t = absl::FromUnixSeconds(job.last_progress_time().seconds()) +
                     absl::Nanoseconds(job.last_progress_time().nanos());
      progress = FormatSeconds(absl::ToDoubleSeconds(now - t)) + " ago";
    }
    table.AddRow({job.job_id(), absl::StrCat(job.generation()),
                  absl::StrCat(job.ranks_reporting(), "/", job.world_size()),
                  absl::StrCat(job.ranks_alive()), absl::StrCat(job.nodes()), Step(job.step()),
                  FormatSeconds(job.step_p50_seconds()), FormatSeconds(job.step_p99_seconds()),
                  progress, absl::StrCat(job.heartbeats_received())});
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
  Table table({"RANK", "NODE", "LOCAL", "PID", "STEP", "STEP_P50", "STEP_P99", "LAST_SEEN",
               "ALIVE", "LOSS"});
  for (const v1::Rank* r : ranks) {
    table.AddRow({absl::StrCat(r->rank()), r->node(), absl::StrCat(r->local_rank()),
                  absl::StrCat(r->pid()), Step(r->step()), FormatSeconds(r->step_p50_seconds()),
                  FormatSeconds(r->step_p99_seconds()),
                  FormatSeconds(r->last_heartbeat_age_seconds()) + " ago",
                  r->alive() ? "yes" : "no",
                  r->has_loss() ? absl::StrFormat("%.4g", r->loss()) : "-"});
  }
  return table.Render();
}

std::string RenderNodesTable(const v1::ListNodesResponse& response) {
  Table table({"NODE", "JOB", "CONNECTED", "COMMAND", "RANKS", "LAST_REPORT", "HEARTBEATS"});
  for (const v1::Node& n : response.nodes()) {
    table.AddRow({n.node(), n.job_id(), n.connected() ? "yes" : "no", n.launcher_state(),
                  absl::StrCat(n.ranks()), FormatSeconds(n.last_report_age_seconds()) + " ago",
                  absl::StrCat(n.heartbeats_received())});
  }
  return table.Render();
}

}  // namespace trainsup
