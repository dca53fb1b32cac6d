#ifndef TRAINSUP_AGENT_DCGM_METRICS_H_
#define TRAINSUP_AGENT_DCGM_METRICS_H_

// What NVIDIA's dcgm-exporter says of each GPU (docs/gpu.md, "DCGM"): its
// /metrics text (the Prometheus exposition format) read for the few series
// that explain a slow or failing GPU. Pure; bounded: a text beyond
// kMaxDcgmTextBytes is refused unread, a line beyond kMaxDcgmLineBytes is
// skipped and counted.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainsup {

constexpr size_t kMaxDcgmTextBytes = 4 << 20;  // 8 GPUs' full exposition is ~100 KiB
constexpr size_t kMaxDcgmLineBytes = 4096;

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

struct DcgmGpu {
  int index = -1;    // the `gpu` label
  std::string uuid;  // the `UUID` label
  std::optional<uint64_t> clock_event_reasons;  // DCGM_FI_DEV_CLOCKS_EVENT_REASONS (or its
                                                // older name ..._CLOCK_THROTTLE_REASONS)
  std::optional<double> temperature_c;          // DCGM_FI_DEV_GPU_TEMP
  std::optional<double> pcie_replays;           // DCGM_FI_DEV_PCIE_REPLAY_COUNTER
  std::optional<double> ecc_uncorrectable;      // DCGM_FI_DEV_ECC_DBE_VOL_TOTAL
  std::optional<double> uncorrectable_remapped_rows;  // DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS
  std::optional<double> row_remap_failure;      // DCGM_FI_DEV_ROW_REMAP_FAILURE
  std::optional<double> last_xid;               // DCGM_FI_DEV_XID_ERRORS (the last Xid's code)
};

struct DcgmScrape {
  std::vector<DcgmGpu> gpus;  // in the order first named
  // Lines of the series read that were refused: no gpu label (a sample
  // about no GPU), a value that is no number, a line past its bound.
  size_t lines_refused = 0;
};

// Reads an exposition text. InvalidArgument for what is no exposition (an
// HTML page, an empty body) or is past kMaxDcgmTextBytes.
absl::StatusOr<DcgmScrape> ParseDcgmExposition(absl::string_view text);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_DCGM_METRICS_H_
