#ifndef TRAINSUP_AGENT_GPU_HEALTH_POLLER_H_
#define TRAINSUP_AGENT_GPU_HEALTH_POLLER_H_

// Reads the node's GPU health every few seconds, in a thread of its own
// (docs/gpu.md, "GPU health"): `nvidia-smi -q -d PERFORMANCE,ROW_REMAPPER`
// for the clock event reasons and remapped rows, and dcgm-exporter's
// /metrics where one is named, for the error counters (and the reasons, when
// it exports them). A source may take seconds (nvidia-smi on a busy node, an
// exporter that hangs): the agent's loop never waits on one, it takes the
// last reading when it changed. Both reads are bounded in time and size, and
// a source that fails is counted and tried again at the next round.

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/gpu_health.h"

namespace trainsup {

struct GpuHealthPollerOptions {
  std::string nvidia_smi;  // "" or "none": not run
  std::string dcgm_url;    // "" or "none": not read
  absl::Duration interval = absl::Seconds(10);
  absl::Duration nvidia_smi_timeout = absl::Seconds(10);
  absl::Duration dcgm_timeout = absl::Seconds(2);
};

// One round's reading of both sources.
struct GpuHealthReading {
  std::vector<GpuHealth> gpus;
  std::string source;  // "nvidia-smi", "dcgm-exporter" or both, joined by '+'
};

class GpuHealthPoller {
 public:
  explicit GpuHealthPoller(GpuHealthPollerOptions options);
  ~GpuHealthPoller();  // stops the thread, which may wait out a read in progress
  GpuHealthPoller(const GpuHealthPoller&) = delete;
  GpuHealthPoller& operator=(const GpuHealthPoller&) = delete;

  // Whether any source is configured (else Start does nothing).
  bool enabled() const;
  void Start();
  // The latest reading when it differs from the last one taken in what the
  // supervisor acts on (HealthChanged), or `always`.
  std::optional<GpuHealthReading> TakeChanged(bool always = false);

  // Failed reads so far, by source (for the agent's log and tests).
  int nvidia_smi_failures() const;
  int dcgm_failures() const;

 private:
  void Run();
  GpuHealthReading ReadOnce();
  std::optional<std::vector<GpuHealth>> ReadNvidiaSmi();
  std::optional<std::vector<GpuHealth>> ReadDcgm();

  const GpuHealthPollerOptions options_;
  bool nvidia_smi_absent_ = false;  // the poller's thread only
  std::thread thread_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<GpuHealthReading> latest_ ABSL_GUARDED_BY(mu_);
  std::vector<GpuHealth> taken_ ABSL_GUARDED_BY(mu_);  // the last reading taken
  bool taken_any_ ABSL_GUARDED_BY(mu_) = false;
  int nvidia_smi_failures_ ABSL_GUARDED_BY(mu_) = 0;
  int dcgm_failures_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_GPU_HEALTH_POLLER_H_
