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

TEST(TorchrunArgsTest, ReadsTheRendezvousTheCommandSets) {
  EXPECT_EQ(PrepareCommand({"torchrun", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1", "a.py"})
                .rendezvous,
            CommandRendezvous::kC10d);
  EXPECT_EQ(PrepareCommand({"torchrun", "--rdzv-backend", "c10d", "a.py"}).rendezvous,
            CommandRendezvous::kC10d);
  PreparedCommand stat = PrepareCommand({"torchrun", "--nnodes=2", "--node_rank", "1", "a.py"});
  EXPECT_EQ(stat.rendezvous, CommandRendezvous::kStatic);
  EXPECT_EQ(stat.node_rank, 1u);
  EXPECT_EQ(PrepareCommand({"torchrun", "--standalone", "a.py"}).rendezvous,
            CommandRendezvous::kNone);
  EXPECT_EQ(PrepareCommand({"torchrun", "--rdzv_backend=etcd-v2", "a.py"}).rendezvous,
            CommandRendezvous::kNone);
  EXPECT_EQ(PrepareCommand({"python3", "train.py"}).rendezvous, CommandRendezvous::kNone);
}

TEST(TorchrunArgsTest, C10dMeetsAtTheEndpointGivenWithIsHostAndTheOtherConfKeysKept) {
  const Argv argv = {"torchrun", "--nnodes=1:2", "--rdzv_backend=c10d",
                     "--rdzv_endpoint=127.0.0.1:29400",
                     "--rdzv_conf=last_call_timeout=2,is_host=1", "train.py", "--lr", "1"};
  RendezvousArgs args;
  args.address = "10.0.0.2";
  args.port = 41000;
  args.is_host = false;
  EXPECT_THAT(RewriteRendezvous(argv, CommandRendezvous::kC10d, args),
              ElementsAre("torchrun", "--nnodes=1:2", "--rdzv_backend=c10d",
                          "--rdzv_endpoint=10.0.0.2:41000",
                          "--rdzv_conf=last_call_timeout=2,is_host=0", "train.py", "--lr", "1"));
}

TEST(TorchrunArgsTest, C10dOptionsTheCommandLacksAreAddedAndSeparateValuesReplaced) {
  const Argv argv = {"torchrun", "--rdzv-backend", "c10d", "--rdzv-endpoint", "n1:29400",
                     "a.py"};
  RendezvousArgs args;
  args.address = "fd00::2";
  args.port = 5000;
  args.is_host = true;
  EXPECT_THAT(RewriteRendezvous(argv, CommandRendezvous::kC10d, args),
              ElementsAre("torchrun", "--rdzv_conf=is_host=1", "--rdzv-backend", "c10d",
                          "--rdzv-endpoint", "[fd00::2]:5000", "a.py"));
}

TEST(TorchrunArgsTest, StaticGetsTheHostsAddressAndPortAndAFreshNodeRank) {
  const Argv argv = {"python3", "-m", "torch.distributed.run", "--nnodes=2", "--node_rank=1",
                     "--master_addr", "old", "a.py", "--master_port=1"};
  RendezvousArgs args;
  args.address = "n3";
  args.port = 29500;
  args.node_rank = 0;
  EXPECT_THAT(RewriteRendezvous(argv, CommandRendezvous::kStatic, args),
              ElementsAre("python3", "-m", "torch.distributed.run", "--master_port=29500",
                          "--nnodes=2", "--node_rank=0", "--master_addr", "n3", "a.py",
                          "--master_port=1"));
}

TEST(TorchrunArgsTest, ACommandTrainsupdDoesNotMoveIsLeftAsItIs) {
  const Argv argv = {"torchrun", "--standalone", "a.py"};
  RendezvousArgs args;
  args.address = "h";
  args.port = 1;
  EXPECT_EQ(RewriteRendezvous(argv, CommandRendezvous::kNone, args), argv);
  EXPECT_EQ(RewriteRendezvous({"python3", "a.py"}, CommandRendezvous::kStatic, args),
            Argv({"python3", "a.py"}));
}

}  // namespace
}  // namespace trainsup
