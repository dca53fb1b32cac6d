// dcgm-exporter's HPC job-mapping files as the agent writes them
// (agent/dcgm_job_mapping.h), on real files.
#include "agent/dcgm_job_mapping.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<GpuInfo> FourGpus() {
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < 4; ++i) {
    GpuInfo gpu;
    gpu.index = i;
    gpu.uuid = "GPU-" + std::to_string(i) + "aaa-bbb";
    gpus.push_back(gpu);
  }
  return gpus;
}

TEST(JobGpuIndicesTest, CudaVisibleDevicesNamesTheJobsGpus) {
  EXPECT_THAT(JobGpuIndices(std::nullopt, FourGpus()), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(JobGpuIndices(std::string("2,3"), FourGpus()), ElementsAre(2, 3));
  EXPECT_THAT(JobGpuIndices(std::string("GPU-3aaa,GPU-1"), FourGpus()), ElementsAre(3, 1));
  EXPECT_THAT(JobGpuIndices(std::string("2, 3"), {}), ElementsAre(2, 3));  // no map needed
  EXPECT_THAT(JobGpuIndices(std::string("GPU-unknown"), FourGpus()), IsEmpty());
  EXPECT_THAT(JobGpuIndices(std::nullopt, {}), IsEmpty());
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(DcgmJobMappingTest, EachGpusFileNamesTheJobAndOnlyItsOwnAreRemoved) {
  char dir[] = "/tmp/trainsup-jobmap-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  ASSERT_TRUE(WriteJobMapping(d, {2, 3}, "llama-70b").ok());
  EXPECT_EQ(Read(d + "/2"), "llama-70b\n");
  EXPECT_EQ(Read(d + "/3"), "llama-70b\n");
  EXPECT_NE(access((d + "/2.trainsup-tmp").c_str(), F_OK), 0);  // renamed into place
  // GPU 3 has since gone to another job: its file is left alone.
  ASSERT_TRUE(WriteJobMapping(d, {3}, "other-job").ok());
  RemoveJobMapping(d, {2, 3}, "llama-70b");
  EXPECT_NE(access((d + "/2").c_str(), F_OK), 0);
  EXPECT_EQ(Read(d + "/3"), "other-job\n");
  EXPECT_FALSE(WriteJobMapping(d + "/missing", {0}, "x").ok());
  (void)!system(("rm -rf " + d).c_str());
}

}  // namespace
}  // namespace trainsup
