#ifndef TRAINSUP_DAEMON_METRICS_H_
#define TRAINSUP_DAEMON_METRICS_H_

#include <cstdint>
#include <vector>

#include "daemon/agent_service.h"
#include "daemon/supervisor_host.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace trainsup {

struct MetricsOptions {
  // Per-rank series (trainsup_rank_*) are exported only for jobs with at most
  // this many ranks, so that a 100k-rank job exports per-job aggregates, not
  // 100k series per metric. Default: 256.
  uint32_t max_ranks_per_job = 256;
  // And over all jobs, at most this many ranks' series per scrape: jobs in
  // job id order, each whole or not at all, so that many small jobs cannot
  // add up to what one large job may not. Default: 4096.
  uint32_t max_ranks_total = 4096;
  // Above that cap, at most this many flagged stragglers per job are
  // exported (the slowest first). Default: 10.
  uint32_t max_stragglers_per_job = 10;
};

// Renders the supervisor's state as Prometheus metric families at scrape
// time, from one consistent read of the core (the way kube-state-metrics and
// node_exporter collectors work). Metric names and labels are documented in
// docs/metrics.md. Thread-safe.
class SupervisorCollector : public prometheus::Collectable {
 public:
  // `streams` (may be null: no stream figures) is not owned.
  SupervisorCollector(const SupervisorHost* host, MetricsOptions options,
                      const AgentStreamStats* streams = nullptr)
      : host_(host), options_(options), streams_(streams) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const SupervisorHost* const host_;
  const MetricsOptions options_;
  const AgentStreamStats* const streams_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_METRICS_H_
