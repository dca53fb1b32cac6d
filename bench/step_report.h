#ifndef TRAINSUP_BENCH_STEP_REPORT_H_
#define TRAINSUP_BENCH_STEP_REPORT_H_

#include <cstdint>
#include <string>

#include "daemon/core/heartbeat.h"

namespace trainsup {

// A running node's report of generation 1 at `step`: a STEP heartbeat of
// each of its ranks [first, end) of `world` (`per_node` to a node, pid 1000 +
// rank, 0.1 s steps of about 0.08 s compute), and on step 0 their processes.
inline NodeReportInfo StepReport(const std::string& job, int first, int end, int per_node,
                                 int world, int64_t step) {
  NodeReportInfo report;
  report.generation = 1;
  report.launcher.state = LauncherState::kRunning;
  for (int r = first; r < end; ++r) {
    Heartbeat hb;
    hb.kind = HeartbeatKind::kStep;
    hb.job = job;
    hb.rank = r;
    hb.local_rank = r % per_node;
    hb.world_size = world;
    hb.pid = 1000 + r;
    hb.step = step;
    hb.step_duration_s = 0.1;
    hb.compute_s = 0.08 + 0.0001 * (r % 7);
    hb.generation = 1;
    report.heartbeats.push_back(std::move(hb));
    if (step == 0) report.processes.push_back({static_cast<uint32_t>(r), 0, 1000u + r, 1, true});
  }
  return report;
}

}  // namespace trainsup

#endif  // TRAINSUP_BENCH_STEP_REPORT_H_
