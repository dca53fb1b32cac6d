#ifndef TRAINSUP_AGENT_GPU_HEALTH_H_
#define TRAINSUP_AGENT_GPU_HEALTH_H_

// What a GPU's health sources say of it (docs/gpu.md): dcgm-exporter's
// /metrics (dcgm_metrics.h) or `nvidia-smi -q` (nvidia_smi_q.h), in one shape.

#include <cstdint>
#include <optional>
#include <string>

namespace trainsup {

// NVML's clock event reasons (nvml.h, nvmlClocksEventReason*; the bits
// recorded in tests/testdata/gpu/clock_reasons.md).
enum ClockEventReason : uint64_t {
  kClockGpuIdle = 0x1,
  kClockApplicationsSetting = 0x2,
  kClockSwPowerCap = 0x4,
  kClockHwSlowdown = 0x8,
  kClockSyncBoost = 0x10,
  kClockSwThermalSlowdown = 0x20,
  kClockHwThermalSlowdown = 0x40,
  kClockHwPowerBrakeSlowdown = 0x80,
  kClockDisplaySetting = 0x100,
};
// The reasons that make a busy GPU slower than its peers: power cap,
// hardware slowdown, thermal slowdown (software or hardware), power brake.
constexpr uint64_t kClockSlowingReasons = kClockSwPowerCap | kClockHwSlowdown |
                                          kClockSwThermalSlowdown | kClockHwThermalSlowdown |
                                          kClockHwPowerBrakeSlowdown;
// "hardware thermal slowdown, power brake"; "" when none of the slowing reasons.
std::string SlowingReasonsText(uint64_t reasons);

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

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_GPU_HEALTH_H_
