#ifndef TRAINSUP_DAEMON_DESCRIPTORS_H_
#define TRAINSUP_DAEMON_DESCRIPTORS_H_

// File descriptors: every agent stream holds one (its TCP connection), and a
// process out of them loses more than streams (gRPC 1.51 stops accepting for
// good, the store cannot open its journal). docs/limits.md.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace trainsup {

struct DescriptorLimit {
  uint64_t soft_before = 0;  // the soft RLIMIT_NOFILE the process was started with
  uint64_t soft = 0;         // the soft limit now
  uint64_t hard = 0;
};

// Raises the soft RLIMIT_NOFILE to the hard limit (at most fs.nr_open), as
// nginx and most servers do: the soft limit of a login shell or of systemd
// (1,024) would cap trainsupd near 1,000 agents.
DescriptorLimit RaiseDescriptorLimit();

// The soft RLIMIT_NOFILE now.
uint64_t DescriptorSoftLimit();

// Descriptors this process has open (entries of /proc/self/fd); -1 when
// that cannot be read (e.g. no descriptor left to read it with).
int64_t OpenDescriptors();

// Descriptors kept for everything but agent streams: operators' calls,
// the state store (database, WAL, shared memory), the metrics endpoint and
// its scrapers, fence commands' pipes, the log, gRPC's own (epoll, wakeups),
// and connections being accepted or refused.
uint64_t DescriptorHeadroom(uint64_t limit);

// How many agent streams `limit` descriptors can hold: limit - headroom, at
// least 1.
size_t AgentStreamsAllowed(uint64_t limit);

// The descriptor and listener series of /metrics (docs/metrics.md):
// process_open_fds, process_max_fds (the names of Prometheus' process
// collector, which Debian's prometheus-cpp lacks), trainsup_agent_streams_max
// and trainsup_listener_restarts_total. Thread-safe.
class DescriptorCollector : public prometheus::Collectable {
 public:
  // `restarts` (not owned) counts the listener's rebuilds.
  DescriptorCollector(size_t max_agents, const std::atomic<uint64_t>* restarts)
      : max_agents_(max_agents), restarts_(restarts) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const size_t max_agents_;
  const std::atomic<uint64_t>* const restarts_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_DESCRIPTORS_H_
