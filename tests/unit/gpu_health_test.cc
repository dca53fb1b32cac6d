// One reading of a node's GPUs from nvidia-smi -q and dcgm-exporter
// (agent/gpu_health.h), on recorded output (tests/testdata/gpu).
#include "agent/gpu_health.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "agent/dcgm_metrics.h"
#include "agent/nvidia_smi_q.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

std::string Read(const std::string& name) {
  std::ifstream in(std::string(TRAINSUP_SOURCE_DIR) + "/tests/testdata/gpu/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<GpuHealth> Smi(const std::string& name) {
  absl::StatusOr<std::vector<GpuHealth>> gpus = ParseNvidiaSmiQuery(Read(name));
  EXPECT_TRUE(gpus.ok()) << gpus.status();
  return gpus.ok() ? *gpus : std::vector<GpuHealth>{};
}

TEST(SlowingReasonsTest, OnlyTheReasonsThatSlowABusyGpuAreNamed) {
  EXPECT_EQ(SlowingReasonsText(kClockGpuIdle | kClockSyncBoost | kClockApplicationsSetting), "");
  EXPECT_EQ(SlowingReasonsText(kClockHwThermalSlowdown | kClockSwPowerCap),
            "hardware thermal slowdown, power cap");
}

TEST(MergeGpuHealthTest, DcgmCountersLayOverNvidiaSmisReasonsForTheSameGpu) {
  std::vector<GpuHealth> smi = Smi("throttling/nvidia_smi_q_h100_power_cap_power_brake_sw_thermal.txt");
  ASSERT_EQ(smi.size(), 8u);
  // What an exporter on the same machine says of GPU 2 (by its UUID) and of
  // one GPU nvidia-smi did not list.
  GpuHealth dcgm;
  dcgm.index = 2;
  dcgm.uuid = smi[2].uuid;
  dcgm.ecc_uncorrectable = 3;
  dcgm.temperature_c = 81;
  GpuHealth stranger;
  stranger.index = 9;
  stranger.uuid = "GPU-not-in-nvidia-smi";
  stranger.last_xid = 79;

  const std::vector<GpuHealth> merged = MergeGpuHealth(smi, {dcgm, stranger});

  ASSERT_EQ(merged.size(), 9u);
  EXPECT_EQ(merged[2].pci_bus_id, "00000000:75:00.0");
  EXPECT_EQ(merged[2].ecc_uncorrectable, 3);
  EXPECT_EQ(merged[2].temperature_c, 81);
  EXPECT_EQ(SlowingReasonsText(*merged[2].clock_event_reasons & kClockSlowingReasons),
            "software thermal slowdown, power brake slowdown, power cap");
  EXPECT_EQ(merged[0].ecc_uncorrectable, std::nullopt);
  EXPECT_EQ(merged[8].uuid, "GPU-not-in-nvidia-smi");
  EXPECT_EQ(merged[8].last_xid, 79);
}

TEST(MergeGpuHealthTest, ARecordedExporterAloneIsItsOwnReading) {
  absl::StatusOr<DcgmScrape> scrape = ParseDcgmExposition(Read("dcgm_exporter.txt"));
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  const std::vector<GpuHealth> merged = MergeGpuHealth({}, scrape->gpus);
  ASSERT_EQ(merged.size(), scrape->gpus.size());
  EXPECT_EQ(merged[0].uuid, "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e");
}

TEST(HealthChangedTest, TheSlowingReasonsAndErrorCountersChangeAReadingNotItsTemperature) {
  const std::vector<GpuHealth> before =
      Smi("throttling/nvidia_smi_q_h100_power_cap_power_brake_sw_thermal.txt");
  std::vector<GpuHealth> now = before;
  EXPECT_FALSE(HealthChanged(before, now));
  now[1].temperature_c = 90;                    // drifts every round
  *now[1].clock_event_reasons |= kClockGpuIdle;  // idle between steps
  now[1].pcie_replays = now[1].pcie_replays.value_or(0) + 1;
  EXPECT_FALSE(HealthChanged(before, now));
  now[1].clock_event_reasons = *now[1].clock_event_reasons | kClockHwThermalSlowdown;
  EXPECT_TRUE(HealthChanged(before, now));
  now = before;
  now[5].ecc_uncorrectable = 1;
  EXPECT_TRUE(HealthChanged(before, now));
  now = before;
  now.pop_back();
  EXPECT_TRUE(HealthChanged(before, now));
}

}  // namespace
}  // namespace trainsup
