#ifndef TRAINSUP_AGENT_GPU_HEALTH_H_
#define TRAINSUP_AGENT_GPU_HEALTH_H_

// What a GPU's health sources say of it (docs/gpu.md): dcgm-exporter's
// /metrics (dcgm_metrics.h) or `nvidia-smi -q` (nvidia_smi_q.h), in one shape.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/gpu_clock_reasons.h"

namespace trainsup {

struct GpuHealth {
  int index = -1;    // nvidia-smi's index (dcgm-exporter's `gpu` label); -1: not known
  std::string uuid;  // "GPU-..."
  std::string pci_bus_id;  // as nvidia-smi prints it; "" when not known
  std::optional<uint64_t> clock_event_reasons;  // DCGM_FI_DEV_CLOCKS_EVENT_REASONS (or its
                                                // older name ..._CLOCK_THROTTLE_REASONS)
  std::optional<double> temperature_c;          // DCGM_FI_DEV_GPU_TEMP
  std::optional<double> pcie_replays;           // DCGM_FI_DEV_PCIE_REPLAY_COUNTER
  std::optional<double> ecc_uncorrectable;      // DCGM_FI_DEV_ECC_DBE_VOL_TOTAL
  std::optional<double> uncorrectable_remapped_rows;  // DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS
  std::optional<double> row_remap_failure;      // DCGM_FI_DEV_ROW_REMAP_FAILURE
  std::optional<double> last_xid;               // DCGM_FI_DEV_XID_ERRORS (the last Xid's code)
  std::optional<bool> row_remap_pending;        // nvidia-smi -q only: a remap waits for a reset
};

// One reading of a node's GPUs from both sources: `smi` (nvidia-smi -q, in
// its index order) with what `dcgm` says of the same GPU laid over it (the
// same UUID, else bus id, else index). A GPU only one source names is kept.
std::vector<GpuHealth> MergeGpuHealth(std::vector<GpuHealth> smi,
                                      const std::vector<GpuHealth>& dcgm);

// Whether two readings differ in what the supervisor acts on: the slowing
// clock reasons and the error counters, not a temperature's drift or an
// idle GPU's bit.
bool HealthChanged(const std::vector<GpuHealth>& before, const std::vector<GpuHealth>& now);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_GPU_HEALTH_H_
