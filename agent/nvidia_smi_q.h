#ifndef TRAINSUP_AGENT_NVIDIA_SMI_Q_H_
#define TRAINSUP_AGENT_NVIDIA_SMI_Q_H_

// `nvidia-smi -q` (or `-q -d PERFORMANCE,ROW_REMAPPER`) read for each GPU's
// clock event reasons ("Clocks Event Reasons", "Clocks Throttle Reasons"
// before driver 535) and remapped rows (docs/gpu.md): where no dcgm-exporter
// exports the clock-event bitmask (it does not by default), nvidia-smi says
// which GPU is throttled and why. Pure; bounded as dcgm_metrics.h is.

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/gpu_health.h"

namespace trainsup {

constexpr size_t kMaxNvidiaSmiQueryBytes = 4 << 20;  // 8 GPUs' full -q is ~75 KiB

// InvalidArgument for a text past the bound or without a "GPU <bus id>" block.
absl::StatusOr<std::vector<GpuHealth>> ParseNvidiaSmiQuery(absl::string_view text);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_NVIDIA_SMI_Q_H_
