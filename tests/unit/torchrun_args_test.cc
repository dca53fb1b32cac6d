// torchrun must run with --max_restarts=0 under the agent: trainsup is the
// job's only restart authority.
#include "agent/torchrun_args.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Argv = std::vector<std::string>;

TEST(TorchrunArgsTest, TorchrunGetsMaxRestartsZeroRightAfterTheTorchrunToken) {
  PreparedCommand c = PrepareCommand({"torchrun", "a.py"});
  EXPECT_TRUE(c.is_torchrun);
  EXPECT_THAT(c.argv, ElementsAre("torchrun", "--max_restarts=0", "a.py"));
  EXPECT_EQ(c.warning, "");
}

TEST(TorchrunArgsTest, TorchrunByPathWithOptionsGetsTheInsertion) {
  PreparedCommand c = PrepareCommand({"/usr/bin/torchrun", "--nnodes=2", "--nproc_per_node=8",
                                      "train.py", "--lr", "0.1"});
  EXPECT_TRUE(c.is_torchrun);
  EXPECT_THAT(c.argv, ElementsAre("/usr/bin/torchrun", "--max_restarts=0", "--nnodes=2",
                                  "--nproc_per_node=8", "train.py", "--lr", "0.1"));
}

TEST(TorchrunArgsTest, ScriptsOwnMaxRestartsFlagIsNotTorchruns) {
  PreparedCommand c =
      PrepareCommand({"/usr/bin/torchrun", "--nnodes=2", "train.py", "--max_restarts", "5"});
  EXPECT_TRUE(c.is_torchrun);
  EXPECT_THAT(c.argv, ElementsAre("/usr/bin/torchrun", "--max_restarts=0", "--nnodes=2",
                                  "train.py", "--max_restarts", "5"));
  EXPECT_EQ(c.warning, "");
}

TEST(TorchrunArgsTest, PythonDashMTorchDistributedRunGetsTheInsertionAfterTheModule) {
  PreparedCommand c = PrepareCommand(
      {"python", "-m", "torch.distributed.run", "--nproc_per_node=2", "train.py"});
  EXPECT_TRUE(c.is_torchrun);
  EXPECT_THAT(c.argv, ElementsAre("python", "-m", "torch.distributed.run", "--max_restarts=0",
                                  "--nproc_per_node=2", "train.py"));
}

TEST(TorchrunArgsTest, PythonWithInterpreterOptionsAndTorchDistributedLaunch) {
  PreparedCommand c =
      PrepareCommand({"/opt/venv/bin/python3", "-u", "-m", "torch.distributed.launch", "t.py"});
  EXPECT_TRUE(c.is_torchrun);
  EXPECT_THAT(c.argv, ElementsAre("/opt/venv/bin/python3", "-u", "-m", "torch.distributed.launch",
                                  "--max_restarts=0", "t.py"));
}

TEST(TorchrunArgsTest, ExistingZeroIsLeftAloneWithoutWarning) {
  for (const Argv& argv : {
           Argv{"torchrun", "--max_restarts=0", "a.py"},
           Argv{"torchrun", "--max-restarts=0", "a.py"},
           Argv{"torchrun", "--max_restarts", "0", "a.py"},
           Argv{"torchrun", "--max-restarts", "0", "a.py"},
           Argv{"torchrun", "--nnodes=2", "--max_restarts=0", "--nproc_per_node=4", "a.py"},
           Argv{"python", "-m", "torch.distributed.run", "--max_restarts=0", "a.py"},
       }) {
    PreparedCommand c = PrepareCommand(argv);
    EXPECT_TRUE(c.is_torchrun) << argv[1];
    EXPECT_EQ(c.argv, argv) << ::testing::PrintToString(argv);
    EXPECT_EQ(c.warning, "") << ::testing::PrintToString(argv);
  }
}

TEST(TorchrunArgsTest, NonZeroIsLeftAsItIsWithAWarningNamingIt) {
  const Argv argv = {"torchrun", "--max_restarts=3", "a.py"};
  PreparedCommand c = PrepareCommand(argv);
  EXPECT_TRUE(c.is_torchrun);
  EXPECT_EQ(c.argv, argv);
  EXPECT_THAT(c.warning, HasSubstr("--max_restarts=3"));
  EXPECT_THAT(c.warning, HasSubstr("--max_restarts=0"));  // what to use instead
}

TEST(TorchrunArgsTest, NonZeroAsSeparateValueIsNamedInTheWarning) {
  const Argv argv = {"torchrun", "--max-restarts", "2", "a.py"};
  PreparedCommand c = PrepareCommand(argv);
  EXPECT_EQ(c.argv, argv);
  EXPECT_THAT(c.warning, HasSubstr("--max-restarts 2"));
}

TEST(TorchrunArgsTest, NonTorchrunCommandIsUntouched) {
  for (const Argv& argv : {
           Argv{"python", "train.py", "--max_restarts", "3"},
           Argv{"bash", "-c", "torchrun a.py"},
           Argv{"/usr/bin/torchrunner", "a.py"},
           Argv{"python", "-m", "torch.distributed.elastic", "a.py"},
           Argv{"python", "-m"},
           Argv{},
       }) {
    PreparedCommand c = PrepareCommand(argv);
    EXPECT_FALSE(c.is_torchrun) << ::testing::PrintToString(argv);
    EXPECT_EQ(c.argv, argv) << ::testing::PrintToString(argv);
    EXPECT_EQ(c.warning, "") << ::testing::PrintToString(argv);
  }
}

TEST(TorchrunArgsTest, TorchrunWithoutScriptStillGetsTheInsertion) {
  PreparedCommand c = PrepareCommand({"torchrun"});
  EXPECT_TRUE(c.is_torchrun);
  EXPECT_THAT(c.argv, ElementsAre("torchrun", "--max_restarts=0"));
}

// The scan of torchrun's options skips the value of `--option value`: a
// user's --max_restarts=3 after `--nproc_per_node 8` is seen and warned of.
TEST(TorchrunArgsTest, MaxRestartsAfterASpaceSeparatedOptionValueIsSeen) {
  const Argv argv = {"torchrun", "--nproc_per_node", "8", "--max_restarts=3", "a.py"};
  PreparedCommand c = PrepareCommand(argv);
  EXPECT_EQ(c.argv, argv);
  EXPECT_THAT(c.warning, HasSubstr("--max_restarts=3"));
}

TEST(TorchrunArgsTest, ReadsTheFewestNodesFromNnodes) {
  EXPECT_EQ(PrepareCommand({"torchrun", "--nnodes=2", "a.py"}).min_nodes, 2u);
  EXPECT_EQ(PrepareCommand({"torchrun", "--nnodes=1:4", "a.py"}).min_nodes, 1u);
  EXPECT_EQ(PrepareCommand({"torchrun", "--nnodes", "3:8", "--nproc_per_node=8", "a.py"}).min_nodes,
            3u);
  // After the user's own --max_restarts, which no longer ends the reading.
  EXPECT_EQ(PrepareCommand({"torchrun", "--max_restarts", "0", "--nnodes=2:2", "a.py"}).min_nodes,
            2u);
  EXPECT_EQ(PrepareCommand({"python3", "-m", "torch.distributed.run", "--nnodes=2:3", "a.py"})
                .min_nodes,
            2u);
}

TEST(TorchrunArgsTest, MinNodesIsUnknownWhenTheCommandDoesNotSay) {
  EXPECT_EQ(PrepareCommand({"torchrun", "a.py"}).min_nodes, 0u);
  EXPECT_EQ(PrepareCommand({"torchrun", "--nnodes=$N", "a.py"}).min_nodes, 0u);
  // The script's own --nnodes is not torchrun's.
  EXPECT_EQ(PrepareCommand({"torchrun", "a.py", "--nnodes=4"}).min_nodes, 0u);
  EXPECT_EQ(PrepareCommand({"python3", "train.py", "--nnodes=2"}).min_nodes, 0u);
  EXPECT_EQ(PrepareCommand({"torchrun", "--nnodes_x=2", "a.py"}).min_nodes, 0u);
}

TEST(TorchrunArgsTest, ReadsWhereTorchrunWritesItsRanksOutput) {
  EXPECT_EQ(PrepareCommand({"torchrun", "--log_dir=/var/log/job", "a.py"}).log_dir,
            "/var/log/job");
  EXPECT_EQ(PrepareCommand({"torchrun", "--log-dir", "/logs", "--redirects=2", "a.py"}).log_dir,
            "/logs");
  EXPECT_EQ(PrepareCommand({"torchrun", "--redirects=2", "a.py", "--log_dir=x"}).log_dir, "");
}

}  // namespace
}  // namespace trainsup
