#ifndef TRAINSUP_DAEMON_CORE_GPU_HEALTH_H_
#define TRAINSUP_DAEMON_CORE_GPU_HEALTH_H_

// What a node's GPUs are like, as its agent's health sources last said
// (docs/gpu.md, "GPU health"): which GPU runs slowed and since when (a
// straggler on it is named with the reason), and the uncorrectable error
// counters, whose rises count against the node. Pure.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"

namespace trainsup {

struct GpuHealthState {
  int32_t index = -1;
  std::string uuid;
  // The slowing clock reasons set (kClockSlowingReasons' bits; 0: none, or
  // no source says) and since when the GPU has had any of them.
  uint64_t slowing = 0;
  absl::Time slowed_since = absl::InfinitePast();
  std::optional<double> temperature_c;
  double ecc_uncorrectable = 0;
  double uncorrectable_remapped_rows = 0;
  bool row_remap_pending = false;
  std::vector<uint32_t> ranks;  // the global ranks on it in the node's generation
};

// An uncorrectable error counter of one GPU that rose between two reports.
struct GpuErrorRise {
  int32_t index = -1;
  std::string counter;  // "uncorrectable ECC errors", "uncorrectable remapped rows"
  double before = 0;
  double now = 0;
};

// Replaces `kept` with `report`, carrying each GPU's slowed_since over (the
// same UUID, else index). Returns the counters that rose; a GPU seen for the
// first time sets the baseline (a counter kept since the driver loaded is
// no news of this job).
std::vector<GpuErrorRise> NoteGpuHealth(absl::Time now, const GpuHealthInfo& report,
                                        std::vector<GpuHealthState>* kept);

// The GPU `rank` runs on when it is slowed; null when it is not (or when
// which GPU it runs on is not known).
const GpuHealthState* SlowedGpuOf(const std::vector<GpuHealthState>& gpus, uint32_t rank);
// "GPU 2 in power cap, power brake slowdown since 07:12:04 UTC (41.0s)".
std::string SlowedGpuNote(const GpuHealthState& gpu, absl::Time now);

// "uncorrectable ECC errors 0 -> 2 on GPU 2".
std::string GpuErrorRiseText(const GpuErrorRise& rise);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_GPU_HEALTH_H_
