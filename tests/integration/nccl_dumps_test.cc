// Where the ranks' NCCL flight recorders write and how the agent asks them
// for a dump (agent/nccl_dumps.h), on real files and a real named pipe.
#include "agent/nccl_dumps.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::Contains;
using ::testing::Not;
using ::testing::Pair;

class NcclDumpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/trainsup-nccl-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    unsetenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE");
    (void)!system(("rm -rf " + dir_).c_str());
  }
  std::string dir_;
};

bool NothingSet(const char*) { return false; }
bool BufferSizeSet(const char* name) { return std::string(name) == "TORCH_NCCL_TRACE_BUFFER_SIZE"; }

TEST_F(NcclDumpsTest, TheRecorderIsTurnedOnWithItsFilesBesideTheStacks) {
  const auto env = FlightRecorderEnv(dir_, NothingSet);
  const std::string prefix = dir_ + "/nccl-trace-rank-";
  EXPECT_THAT(env, Contains(Pair("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")));
  EXPECT_THAT(env, Contains(Pair("TORCH_FR_BUFFER_SIZE", "2000")));
  EXPECT_THAT(env, Contains(Pair("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")));
  EXPECT_THAT(env, Contains(Pair("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", prefix)));
  EXPECT_THAT(env, Contains(Pair("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", prefix)));
  EXPECT_EQ(NcclDumpPathsFor(dir_).DumpOf(3), prefix + "3");
  // The paths are the agent's plumbing (not in the provenance); the ring's
  // size is the job's setting.
  EXPECT_TRUE(IsFlightRecorderPath("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"));
  EXPECT_TRUE(IsFlightRecorderPath("TORCH_FR_DUMP_TEMP_FILE"));
  EXPECT_FALSE(IsFlightRecorderPath("TORCH_NCCL_TRACE_BUFFER_SIZE"));
  EXPECT_EQ(NcclDumpPathsFor(dir_).PipeOf(3), prefix + "3.pipe");
}

TEST_F(NcclDumpsTest, WhatTheUserSetIsKept) {
  const auto env = FlightRecorderEnv(dir_, BufferSizeSet);
  EXPECT_THAT(env, Not(Contains(Pair("TORCH_NCCL_TRACE_BUFFER_SIZE", ::testing::_))));
  setenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/elsewhere/trace_", 1);
  EXPECT_EQ(NcclDumpPathsFor(dir_).DumpOf(0), "/elsewhere/trace_0");
}

TEST_F(NcclDumpsTest, APipeIsAskedOnlyWhenARankReadsIt) {
  const NcclDumpPaths paths = NcclDumpPathsFor(dir_);
  EXPECT_FALSE(AskForNcclDump(paths, 0));  // no pipe: no NCCL group there
  ASSERT_EQ(mkfifo(paths.PipeOf(0).c_str(), 0600), 0);
  EXPECT_FALSE(AskForNcclDump(paths, 0));  // a pipe nobody reads: not blocked on
  // The rank's watchdog holds it open for reading, as torch's DumpPipe does.
  const int reader = open(paths.PipeOf(0).c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  EXPECT_TRUE(AskForNcclDump(paths, 0));
  char byte = 0;
  EXPECT_EQ(read(reader, &byte, 1), 1);
  EXPECT_EQ(byte, '1');
  close(reader);
  // A regular file of the pipe's name is not written to.
  const NcclDumpPaths other = paths;
  ASSERT_EQ(close(open(other.PipeOf(1).c_str(), O_CREAT | O_WRONLY, 0600)), 0);
  EXPECT_FALSE(AskForNcclDump(other, 1));
  EXPECT_EQ(ModifiedNanos(other.DumpOf(9)), 0);
  EXPECT_GT(ModifiedNanos(other.PipeOf(1)), 0);
}

}  // namespace
}  // namespace trainsup
