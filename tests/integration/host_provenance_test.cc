// The host keeps each generation's first step in its provenance
// (docs/provenance.md): seen by the core, stored at the next sweep in the
// state store beside the nodes' records, read back with them, never taken
// from an agent.
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "daemon/core/supervisor.h"
#include "daemon/state_store.h"
#include "daemon/supervisor_host.h"
#include "gtest/gtest.h"
#include "tests/support/null_channel.h"

namespace trainsup {
namespace {

class HostProvenanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/host_provenance_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(dir_ + "/state.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    host_ = std::make_unique<SupervisorHost>(SupervisorOptions(), &clock_, store_.get());
    AgentHelloInfo hello;
    hello.node = "node-a";
    hello.job = "j1";
    hello.incarnation = 1;
    absl::StatusOr<Supervisor::HelloResult> said =
        host_->Hello(hello, std::make_shared<testing::NullChannel>());
    ASSERT_TRUE(said.ok()) << said.status();
    session_ = said->session;
  }

  void TearDown() override {
    host_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Both ranks of node-a at `step` of `generation` (a START each at step < 0).
  void Report(uint64_t generation, int64_t step, double lr) {
    NodeReportInfo report;
    report.sequence = ++sequence_;
    report.generation = generation;
    report.launcher.state = LauncherState::kRunning;
    for (uint32_t rank = 0; rank < 2; ++rank) {
      Heartbeat hb;
      hb.kind = step < 0 ? HeartbeatKind::kStart : HeartbeatKind::kStep;
      hb.job = "j1";
      hb.rank = rank;
      hb.local_rank = rank;
      hb.world_size = 2;
      hb.pid = 100 + rank;
      hb.generation = generation;
      hb.step = step < 0 ? 0 : step;
      if (step >= 0) {
        hb.step_duration_s = 0.1;
        hb.learning_rate = lr;
        hb.samples = 32;
        hb.tokens = 4096;
      }
      report.heartbeats.push_back(hb);
    }
    clock_.Advance(absl::Milliseconds(100));
    ASSERT_TRUE(host_->Report(session_, report).ok());
  }

  FakeClock clock_;
  std::string dir_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<SupervisorHost> host_;
  SessionId session_ = 0;
  uint64_t sequence_ = 0;
};

TEST_F(HostProvenanceTest, TheFirstStepOfTheGenerationIsStoredAtTheSweepAndReadWithTheNodes) {
  v1::GenerationProvenance launched;  // the agent's, claiming a first step of its own
  launched.set_generation(1);
  launched.add_command("torchrun");
  launched.mutable_first_step()->set_step(999);
  ASSERT_TRUE(host_->Provenance(session_, launched).ok());

  Report(1, -1, 0);  // the STARTs
  Report(1, 40, 0.01);
  Report(1, 41, 0.02);
  host_->Sweep();
  Report(1, 42, 0.03);
  host_->Sweep();

  absl::StatusOr<v1::ProvenanceResponse> p = host_->ProvenanceOf("j1", 1);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->nodes_size(), 1);
  EXPECT_EQ(p->nodes(0).node(), "node-a");
  EXPECT_FALSE(p->nodes(0).has_first_step());  // an agent's word is not taken
  ASSERT_TRUE(p->has_first_step());
  EXPECT_EQ(p->first_step().step(), 40);
  EXPECT_DOUBLE_EQ(p->first_step().learning_rate(), 0.01);
  EXPECT_EQ(p->first_step().samples(), 64u);  // summed over the ranks
  EXPECT_EQ(p->first_step().tokens(), 8192u);
  EXPECT_EQ(p->first_step().ranks(), 2u);
}

TEST_F(HostProvenanceTest, AGenerationNotSteppedYetHasNone) {
  v1::GenerationProvenance launched;
  launched.set_generation(1);
  ASSERT_TRUE(host_->Provenance(session_, launched).ok());
  Report(1, -1, 0);
  host_->Sweep();
  absl::StatusOr<v1::ProvenanceResponse> p = host_->ProvenanceOf("j1", 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->has_first_step());
}

}  // namespace
}  // namespace trainsup
