#include "agent/dcgm_metrics.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;

std::string RecordedFile(const std::string& name) {
  std::ifstream in(std::string(TRAINSUP_SOURCE_DIR) + "/tests/testdata/gpu/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(DcgmMetricsTest, ARecordedExpositionGivesEachGpuItsSeries) {
  // dcgm-exporter's text as recorded (tests/testdata/gpu/dcgm_exporter.txt:
  // two Tesla T4 hosts and an A10G; its last rows carry dummy values with no
  // labels, as the file says).
  absl::StatusOr<DcgmScrape> scrape = ParseDcgmExposition(RecordedFile("dcgm_exporter.txt"));
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  ASSERT_FALSE(scrape->gpus.empty());
  const GpuHealth& first = scrape->gpus[0];
  EXPECT_EQ(first.index, 0);
  EXPECT_EQ(first.uuid, "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e");
  EXPECT_EQ(first.temperature_c, 25);
  EXPECT_EQ(first.pcie_replays, 0);
  EXPECT_EQ(first.last_xid, 0);
  // The second host's T4 reports its clock reasons under the older name:
  // 1, the GPU idle, which slows nothing.
  const GpuHealth* second = nullptr;
  for (const GpuHealth& gpu : scrape->gpus) {
    if (gpu.uuid == "GPU-9ef1b6d0-3643-5dd7-b823-c0ec20dcf2d5") second = &gpu;
  }
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(second->clock_event_reasons.has_value());
  EXPECT_EQ(*second->clock_event_reasons, kClockGpuIdle);
  EXPECT_EQ(*second->clock_event_reasons & kClockSlowingReasons, 0u);
  // The dummy rows name no GPU: refused, never a GPU of their own.
  EXPECT_GE(scrape->lines_refused, 2u);
  for (const GpuHealth& gpu : scrape->gpus) EXPECT_GE(gpu.index, 0);
}

TEST(DcgmMetricsTest, ATodaysExporterScrapeIsRead) {
  // dcgm-exporter 4.x on an L4 (tests/testdata/gpu/throttling): the label
  // set of today (pci_bus_id, Hostname), every error counter at 0, and no
  // clock-event series (not among the exporter's default counters).
  absl::StatusOr<DcgmScrape> scrape =
      ParseDcgmExposition(RecordedFile("throttling/dcgm_exporter_l4_labels.txt"));
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  ASSERT_EQ(scrape->gpus.size(), 1u);
  const GpuHealth& gpu = scrape->gpus[0];
  EXPECT_EQ(gpu.uuid, "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c");
  EXPECT_EQ(gpu.temperature_c, 31);
  EXPECT_EQ(gpu.uncorrectable_remapped_rows, 0);
  EXPECT_EQ(gpu.row_remap_failure, 0);
  EXPECT_EQ(gpu.pcie_replays, 0);
  EXPECT_FALSE(gpu.clock_event_reasons.has_value());
  EXPECT_EQ(scrape->lines_refused, 0u);
}

TEST(DcgmMetricsTest, SlowingReasonsAreNamed) {
  EXPECT_EQ(SlowingReasonsText(kClockGpuIdle), "");
  EXPECT_EQ(SlowingReasonsText(kClockHwThermalSlowdown | kClockHwPowerBrakeSlowdown),
            "hardware thermal slowdown, power brake slowdown");
  EXPECT_EQ(SlowingReasonsText(kClockSwPowerCap), "power cap");
}

TEST(DcgmMetricsTest, WhatIsNoExpositionIsRefused) {
  EXPECT_FALSE(ParseDcgmExposition("").ok());
  EXPECT_FALSE(ParseDcgmExposition("<html><body>502 Bad Gateway</body></html>").ok());
  EXPECT_FALSE(ParseDcgmExposition("# HELP x y\n# TYPE x gauge\n").ok());
  EXPECT_THAT(ParseDcgmExposition(std::string(kMaxDcgmTextBytes + 1, 'x')).status().message(),
              HasSubstr("past"));
}

TEST(DcgmMetricsTest, BrokenLinesAreCountedAndSkipped) {
  const std::string text =
      "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"GPU-a\"} 41\n"
      "DCGM_FI_DEV_GPU_TEMP{gpu=\"1\",UUID=\"GPU-b\" 40\n"         // unterminated
      "DCGM_FI_DEV_GPU_TEMP{gpu=\"2\",UUID=\"GPU-c\"} hot\n"       // no number
      "DCGM_FI_DEV_GPU_TEMP{gpu=\"3\",UUID=\"GPU-\\\"d\"} NaN\n"   // not finite
      "DCGM_FI_DEV_GPU_TEMP{UUID=\"GPU-e\"} 39\n"                  // no gpu label
      "DCGM_FI_DEV_GPU_TEMP{gpu=\"-1\",UUID=\"GPU-f\"} 39\n" +     // a negative index
      std::string("DCGM_FI_DEV_GPU_TEMP{gpu=\"4\",x=\"") + std::string(5000, 'y') + "\"} 1\n" +
      "OTHER_SERIES{gpu=\"9\"} 1\n";                                // not read at all
  absl::StatusOr<DcgmScrape> scrape = ParseDcgmExposition(text);
  ASSERT_TRUE(scrape.ok());
  ASSERT_EQ(scrape->gpus.size(), 1u);
  EXPECT_EQ(scrape->gpus[0].uuid, "GPU-a");
  EXPECT_EQ(scrape->gpus[0].temperature_c, 41);
  EXPECT_EQ(scrape->lines_refused, 6u);
}

}  // namespace
}  // namespace trainsup
