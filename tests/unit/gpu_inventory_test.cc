#include "agent/gpu_inventory.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::string RecordedFile(const std::string& name) {
  std::ifstream in(std::string(TRAINSUP_SOURCE_DIR) + "/tests/testdata/gpu/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

GpuInfo Gpu(int index, const std::string& uuid = "") {
  GpuInfo gpu;
  gpu.index = index;
  gpu.uuid = uuid;
  return gpu;
}

TEST(GpuInventoryTest, ARecordedQueryIsReadByItsHeader) {
  // nvidia-smi --query-gpu=name,pci.bus,index,uuid --format=csv, 5 GPUs.
  absl::StatusOr<std::vector<GpuInfo>> gpus = ParseGpuQuery(RecordedFile("nvidia_smi_5gpu.csv"));
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 5u);
  EXPECT_EQ((*gpus)[1].index, 1);
  EXPECT_EQ((*gpus)[1].uuid, "GPU-15ea7bf9-1a0e-2d7f-9c62-c28e5ca1aaf1");
  EXPECT_EQ((*gpus)[4].pci->ToString(), "0000:0a:00");  // pci.bus "0x0A"

  GpuInventory inventory(*gpus);
  const GpuInfo at = inventory.At(*ParsePciAddress("PCI:0000:09:00"));
  EXPECT_EQ(at.index, 3);
  EXPECT_EQ(at.uuid, "GPU-03ddeff3-19c4-6676-d02d-6942bd80630d");
}

TEST(GpuInventoryTest, WhatNvidiaSmiDoesNotListIsKnownByItsAddressAndTheDriversUuid) {
  GpuInventory inventory;
  const PciAddress pci = *ParsePciAddress("0000:91:00");
  EXPECT_EQ(inventory.At(pci).index, -1);
  inventory.NoteUuid(pci, "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b");
  EXPECT_EQ(inventory.At(pci).uuid, "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b");
  EXPECT_EQ(inventory.At(pci).index, -1);
}

TEST(GpuInventoryTest, OutputWithoutAHeaderNamingTheIndexIsRefused) {
  EXPECT_FALSE(ParseGpuQuery("").ok());
  EXPECT_FALSE(ParseGpuQuery("0, 00000000:1A:00.0, GPU-x, 1\n").ok());
  EXPECT_FALSE(ParseGpuQuery("<html>NVIDIA-SMI has failed</html>").ok());
  // A row that does not parse is left out, the others kept.
  absl::StatusOr<std::vector<GpuInfo>> gpus =
      ParseGpuQuery("index, pci.bus_id, uuid\nx, y, z\n1, 00000000:1B:00.0, GPU-a\n");
  ASSERT_TRUE(gpus.ok());
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_EQ((*gpus)[0].pci->ToString(), "0000:1b:00");
}

TEST(GpuInventoryTest, LocalRankIUsesTheIthVisibleGpu) {
  // No CUDA_VISIBLE_DEVICES: local rank i on GPU i.
  EXPECT_THAT(LocalRanksOnGpu(Gpu(3), std::nullopt, 8), ElementsAre(3u));
  EXPECT_THAT(LocalRanksOnGpu(Gpu(3), std::nullopt, 2), IsEmpty());  // no rank on it
  EXPECT_THAT(LocalRanksOnGpu(Gpu(-1), std::nullopt, 8), IsEmpty());
  // CUDA_VISIBLE_DEVICES=2,3: GPU 3 is local rank 1's.
  EXPECT_THAT(LocalRanksOnGpu(Gpu(3), std::string("2,3"), 2), ElementsAre(1u));
  EXPECT_THAT(LocalRanksOnGpu(Gpu(0), std::string("2,3"), 2), IsEmpty());
  // By UUID, or a unique prefix of it, as CUDA accepts.
  const GpuInfo gpu = Gpu(3, "GPU-03ddeff3-19c4-6676-d02d-6942bd80630d");
  EXPECT_THAT(LocalRanksOnGpu(gpu, std::string("GPU-f3da2e71,GPU-03ddeff3"), 2), ElementsAre(1u));
  // Set but empty: CUDA shows no GPU.
  EXPECT_THAT(LocalRanksOnGpu(Gpu(0), std::string(""), 2), IsEmpty());
}

}  // namespace
}  // namespace trainsup
