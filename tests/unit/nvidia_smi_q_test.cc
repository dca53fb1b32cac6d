#include "agent/nvidia_smi_q.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

// `nvidia-smi -q` as recorded on real machines (tests/testdata/gpu/throttling,
// README.md and SOURCES.md there say where each came from).
std::vector<GpuHealth> Recorded(const std::string& name) {
  std::ifstream in(std::string(TRAINSUP_SOURCE_DIR) + "/tests/testdata/gpu/throttling/" + name);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::vector<GpuHealth>> gpus = ParseNvidiaSmiQuery(text.str());
  EXPECT_TRUE(gpus.ok()) << gpus.status();
  return gpus.ok() ? *gpus : std::vector<GpuHealth>{};
}

uint64_t Slowing(const GpuHealth& gpu) {
  return gpu.clock_event_reasons.value_or(0) & kClockSlowingReasons;
}

TEST(NvidiaSmiQueryTest, EightH100sInHardwareSlowdownAndPowerBrake) {
  const std::vector<GpuHealth> gpus = Recorded("nvidia_smi_q_h100_hw_slowdown_power_brake.txt");
  ASSERT_EQ(gpus.size(), 8u);
  EXPECT_EQ(gpus[0].pci_bus_id, "00000000:19:00.0");
  EXPECT_EQ(gpus[0].uuid, "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa");
  EXPECT_EQ(gpus[0].pcie_replays, 67);
  for (const GpuHealth& gpu : gpus) {
    EXPECT_EQ(gpu.clock_event_reasons, kClockHwSlowdown | kClockHwPowerBrakeSlowdown) << gpu.index;
  }
  EXPECT_EQ(gpus[7].index, 7);
  EXPECT_EQ(SlowingReasonsText(Slowing(gpus[0])), "power brake slowdown, hardware slowdown");
}

TEST(NvidiaSmiQueryTest, OneH100OfEightAtPowerCapPowerBrakeAndThermalSlowdown) {
  const std::vector<GpuHealth> gpus =
      Recorded("nvidia_smi_q_h100_power_cap_power_brake_sw_thermal.txt");
  ASSERT_EQ(gpus.size(), 8u);
  std::vector<std::string> slowed;
  for (const GpuHealth& gpu : gpus) {
    if (Slowing(gpu) != 0) slowed.push_back(gpu.pci_bus_id);
  }
  EXPECT_EQ(slowed, std::vector<std::string>{"00000000:75:00.0"});
  EXPECT_EQ(gpus[2].clock_event_reasons,
            kClockSwPowerCap | kClockHwPowerBrakeSlowdown | kClockSwThermalSlowdown);
  EXPECT_EQ(gpus[0].clock_event_reasons, kClockGpuIdle);  // idle slows nothing
}

TEST(NvidiaSmiQueryTest, TwoRtx4090sOfEightAtTheirPowerCap) {
  const std::vector<GpuHealth> gpus = Recorded("nvidia_smi_q_rtx4090_sw_power_cap.txt");
  ASSERT_EQ(gpus.size(), 8u);
  std::vector<int> capped;
  for (const GpuHealth& gpu : gpus) {
    if (Slowing(gpu) == kClockSwPowerCap) capped.push_back(gpu.index);
  }
  EXPECT_EQ(capped, (std::vector<int>{1, 4}));
}

TEST(NvidiaSmiQueryTest, AnA10WithUncorrectableRemappedRowsPendingAReset) {
  const std::vector<GpuHealth> gpus = Recorded("nvidia_smi_q_a10_remapped_rows.txt");
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].uncorrectable_remapped_rows, 4);
  EXPECT_EQ(gpus[0].row_remap_pending, true);
  EXPECT_EQ(gpus[0].row_remap_failure, 0);
  EXPECT_EQ(Slowing(gpus[0]), 0u);
}

TEST(NvidiaSmiQueryTest, WhatIsNoQueryOutputIsRefused) {
  EXPECT_FALSE(ParseNvidiaSmiQuery("").ok());
  EXPECT_FALSE(ParseNvidiaSmiQuery("NVIDIA-SMI has failed because it couldn't communicate with "
                                   "the NVIDIA driver.")
                   .ok());
  EXPECT_FALSE(ParseNvidiaSmiQuery(std::string(kMaxNvidiaSmiQueryBytes + 1, 'x')).ok());
}

}  // namespace
}  // namespace trainsup
