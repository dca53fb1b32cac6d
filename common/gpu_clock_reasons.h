#ifndef TRAINSUP_COMMON_GPU_CLOCK_REASONS_H_
#define TRAINSUP_COMMON_GPU_CLOCK_REASONS_H_

// NVML's clock event reasons (nvml.h, nvmlClocksEventReason*; the bits are
// recorded in tests/testdata/gpu/clock_reasons.md): why a GPU runs below its
// clocks. Shared by the agent, which reads them (dcgm-exporter, nvidia-smi),
// and trainsupd, which names them in a straggler's event.

#include <cstdint>
#include <string>

namespace trainsup {

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
// Not idle, the applications' clock setting, sync boost or the display:
// they say nothing of a GPU's health.
constexpr uint64_t kClockSlowingReasons = kClockSwPowerCap | kClockHwSlowdown |
                                          kClockSwThermalSlowdown | kClockHwThermalSlowdown |
                                          kClockHwPowerBrakeSlowdown;
// "hardware thermal slowdown, power brake slowdown"; "" when none of the
// slowing reasons is set.
std::string SlowingReasonsText(uint64_t reasons);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_GPU_CLOCK_REASONS_H_
