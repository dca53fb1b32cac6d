#include "daemon/descriptors.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <utility>

#include "daemon/metric_family.h"

namespace trainsup {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

// fs.nr_open: no RLIMIT_NOFILE may exceed it (setrlimit fails with EPERM).
uint64_t NrOpen() {
  std::ifstream in("/proc/sys/fs/nr_open");
  uint64_t value = 0;
  if (in >> value && value > 0) return value;
  return 1u << 20;  // the kernel's default
}

}  // namespace

DescriptorLimit RaiseDescriptorLimit() {
  DescriptorLimit limit;
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return limit;
  limit.soft_before = limit.soft = rl.rlim_cur;
  limit.hard = rl.rlim_max;
  const rlim_t target = std::min<rlim_t>(rl.rlim_max, NrOpen());
  if (rl.rlim_cur < target) {
    rl.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0) limit.soft = target;
  }
  return limit;
}

uint64_t DescriptorSoftLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  return rl.rlim_cur;
}

int64_t OpenDescriptors() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int64_t count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the directory's own descriptor
}

uint64_t DescriptorHeadroom(uint64_t limit) { return 64 + limit / 20; }

size_t AgentStreamsAllowed(uint64_t limit) {
  const uint64_t headroom = DescriptorHeadroom(limit);
  return limit > headroom + 1 ? static_cast<size_t>(limit - headroom) : 1;
}

std::vector<MetricFamily> DescriptorCollector::Collect() const {
  MetricFamily open = Family("process_open_fds", "Number of open file descriptors.",
                             MetricType::Gauge);
  const int64_t count = OpenDescriptors();
  if (count >= 0) AddSample(open, {}, static_cast<double>(count));
  MetricFamily max = Family("process_max_fds",
                            "Maximum number of open file descriptors (soft RLIMIT_NOFILE).",
                            MetricType::Gauge);
  AddSample(max, {}, static_cast<double>(DescriptorSoftLimit()));
  MetricFamily streams = Family(
      "trainsup_agent_streams_max",
      "Agent streams trainsupd holds at most (--max-agents, kept below what descriptors allow).",
      MetricType::Gauge);
  AddSample(streams, {}, static_cast<double>(max_agents_));
  MetricFamily restarts = Family(
      "trainsup_listener_restarts_total",
      "Times the gRPC listener was rebuilt after gRPC stopped accepting connections "
      "(out of descriptors).",
      MetricType::Counter);
  AddSample(restarts, {}, static_cast<double>(restarts_->load()));
  return {std::move(open), std::move(max), std::move(streams), std::move(restarts)};
}

}  // namespace trainsup
