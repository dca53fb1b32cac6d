// Supervisor::Diagnose: what the agents reported reaches the diagnosis
// through the read model (the ranks' step shares, the failure recorded, the
// events kept), driven like the agents' adapter with a fake clock.
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/core/diagnose.h"
#include "daemon/core/supervisor.h"
#include "gtest/gtest.h"
#include "tests/support/fake_agents.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace testing {
namespace {

using ::trainsup::testing::AtS;

std::optional<double> FigureOf(const Finding& f, const std::string& name) {
  for (const auto& [key, value] : f.figures) {
    if (key == name) return value;
  }
  return std::nullopt;
}

class SupervisorDiagnoseTest : public FakeAgentsTest {
 protected:
  void SetUp() override {
    options_ = FakeAgentsOptions();
    Create();
    ConnectAgents(AtS(0));
    SendStarted(AtS(1), a_);
    SendStarted(AtS(1), b_);
  }

  // Steps first..last of `step_s` on every rank, 0.18 s of compute;
  // node-b's ranks wait `wait_b` of each for data. Step s is reported at
  // 1 + 0.3 s.
  void Steps(int64_t first, int64_t last, double step_s, double wait_b) {
    for (int64_t s = first; s <= last; ++s) {
      for (SessionId session : {a_, b_}) {
        std::vector<Heartbeat> hbs;
        std::vector<RankProcessInfo> processes;
        for (uint32_t r : RanksOf(session)) {
          Heartbeat hb = Hb(HeartbeatKind::kStep, r, s);
          hb.step_duration_s = step_s;
          hb.compute_s = 0.18;
          hb.data_wait_s = session == b_ ? wait_b : 0.0;
          hbs.push_back(hb);
          processes.push_back(Alive(r));
        }
        Send(AtS(1 + 0.3 * s), session, hbs, processes);
      }
    }
  }

  Diagnosis DiagnoseAt(absl::Time now) {
    absl::StatusOr<Diagnosis> d = sup_->Diagnose("job", now);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : Diagnosis();
  }
};

TEST_F(SupervisorDiagnoseTest, TheRanksDataWaitReachesTheReadModelAndTheVerdict) {
  Steps(1, 30, /*step_s=*/0.3, /*wait_b=*/0.1);
  Sweep(AtS(10));
  std::vector<RankView> rows;
  std::vector<RankTexts> texts;
  ASSERT_TRUE(sup_->RankViewsOf("job", &rows, &texts));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_TRUE(rows[0].has_step_shares);
  EXPECT_NEAR(rows[0].data_wait_share, 0.0, 1e-6);
  EXPECT_NEAR(rows[2].data_wait_share, 0.1 / 0.3, 1e-4);
  ASSERT_TRUE(rows[2].has_comm_share);
  EXPECT_NEAR(rows[2].comm_share, 0.02 / 0.3, 1e-4);
  EXPECT_NEAR(rows[0].comm_share, 0.12 / 0.3, 1e-4);

  const Diagnosis d = DiagnoseAt(AtS(10));
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kInputBound) << d.headline;
  EXPECT_EQ(d.findings[1].node, "node-b");
  EXPECT_NEAR(*FigureOf(d.findings[1], "node_share"), 0.1 / 0.3, 1e-4);
}

TEST_F(SupervisorDiagnoseTest, ACrashNamesItsCulpritNodeFaultAndWhatIsDone) {
  Steps(1, 5, /*step_s=*/0.2, /*wait_b=*/0.0);
  EXPECT_EQ(DiagnoseAt(AtS(3)).verdict, DiagnosisVerdict::kHealthy);
  // Rank 0 on node-a killed by SIGSEGV: a native crash, charged to node-a.
  Send(AtS(5), a_, {}, {Died(0, 0.5, 0, /*signal=*/11), Alive(1)});
  Sweep(AtS(6));
  ASSERT_EQ(state(), "stopping");
  const Diagnosis d = DiagnoseAt(AtS(6));
  EXPECT_EQ(d.verdict, DiagnosisVerdict::kNotProgressing);
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.rank, 0u);
  EXPECT_EQ(f.node, "node-a");
  EXPECT_EQ(*FigureOf(f, "node_fault"), 1);
  EXPECT_EQ(*FigureOf(f, "signal"), 11);
  EXPECT_NE(f.handling.find("generation 2"), std::string::npos) << f.handling;
  EXPECT_NE(f.event_id, 0u);
}

TEST_F(SupervisorDiagnoseTest, RanksExitingAfterTheLastStepAreEndingNotSteppingUnderNoThreshold) {
  Steps(1, 5, /*step_s=*/0.2, /*wait_b=*/0.0);
  Sweep(AtS(3));
  ASSERT_TRUE(sup_->ViewOf("job", AtS(3))->stall_threshold.has_value());
  // The last step is done: node-a's ranks exit 0, node-b's are still exiting.
  Send(AtS(3.5), a_, {}, {Died(0, 0.1, 0), Died(1, 0.1, 0)});
  Sweep(AtS(4));
  ASSERT_EQ(state(), "running");
  EXPECT_FALSE(sup_->ViewOf("job", AtS(4))->stall_threshold.has_value());
  const Diagnosis d = DiagnoseAt(AtS(4));
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.summary.rfind("ending: 2 of 4 ranks exited; the last step 5 was ", 0), 0u)
      << f.summary;
  EXPECT_EQ(f.summary.find("stall threshold"), std::string::npos) << f.summary;
  EXPECT_FALSE(FigureOf(f, "threshold_seconds").has_value());
  EXPECT_EQ(*FigureOf(f, "ranks_exited"), 2);
}

TEST_F(SupervisorDiagnoseTest, AnUnknownJobIsNotFound) {
  EXPECT_EQ(sup_->Diagnose("nope", AtS(1)).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace testing
}  // namespace trainsup
