// RestoreState on its own: the state store's records back into the core at
// start-up (quarantines and the failures that still count, each job's
// lifecycle, exposure, failures and restarts, pending fences, events), read
// from what the restored parts decide afterwards. A fake clock.
#include "daemon/core/state_restore.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/core_parts.h"

namespace trainsup {
namespace {

using ::trainsup::testing::CorePartsTest;

class StateRestoreTest : public CorePartsTest {
 protected:
  void Restore(const PersistedState& state) {
    RestoreState(now(), state, options_, agents_, quarantine_, jobs_, decisions_);
  }
  // A row of job "job" at generation 3 in `state`, changed 5 minutes ago.
  JobRow Row(const std::string& state) const {
    JobRow row;
    row.job = "job";
    row.generation = 3;
    row.state = state;
    row.reason = "was " + state;
    row.world_size = 4;
    row.changed = now() - absl::Minutes(5);
    return row;
  }
  FailureRow Charged(const std::string& node, absl::Duration ago) const {
    FailureRow f;
    f.time = now() - ago;
    f.job = "job";
    f.kind = "crash";
    f.node = node;
    f.message = "crash of rank 0";
    f.charged = true;
    return f;
  }
  // How many failures the quarantine policy counts against `node` once one
  // more is attributed now.
  int CountedWithOneMore(const std::string& node) {
    return quarantine_.Attribute(now(), node, "one more", agents_.size()).failures;
  }
};

TEST_F(StateRestoreTest, QuarantinesAndTheChargesStillInTheWindowComeBack) {
  PersistedState s;
  s.nodes.push_back({"node-c", true, "3 failures within 1h", now() - absl::Minutes(30), "policy"});
  // node-a's quarantine was lifted 10 minutes ago: charges before it are forgotten.
  s.nodes.push_back({"node-a", false, "lifted", now() - absl::Minutes(10), "operator"});
  s.failures.push_back(Charged("node-a", absl::Minutes(20)));
  s.failures.push_back(Charged("node-a", absl::Minutes(5)));
  s.failures.push_back(Charged("node-b", absl::Hours(2)));  // outside the window
  FailureRow uncharged = Charged("node-b", absl::Minutes(1));
  uncharged.charged = false;
  s.failures.push_back(uncharged);

  Restore(s);

  EXPECT_TRUE(quarantine_.IsQuarantined("node-c"));
  EXPECT_EQ(quarantine_.ReasonOf("node-c"), "3 failures within 1h");
  EXPECT_FALSE(quarantine_.IsQuarantined("node-a"));
  EXPECT_NE(agents_.Find("node-c"), kNoNode);  // known before any agent speaks
  EXPECT_EQ(CountedWithOneMore("node-a"), 2);
  EXPECT_EQ(CountedWithOneMore("node-b"), 1);
  // Restoring decides nothing on its own.
  EXPECT_TRUE(decisions_.Take().events.empty());
}

TEST_F(StateRestoreTest, RunningJobIsBackAtItsGenerationAndKeepsItsExposure) {
  PersistedState s;
  JobRow row = Row("running");
  row.exposure_seconds = 100;
  row.failures = 2;
  row.restarts = 4;
  s.jobs.push_back(row);

  Restore(s);

  ASSERT_NE(jobs_.Find("job"), nullptr);
  EXPECT_EQ(job().job().generation(), 3u);
  EXPECT_EQ(job().lifecycle().state, JobState::kRunning);
  EXPECT_EQ(job().lifecycle().reason, "was running");
  EXPECT_EQ(job().lifecycle().since, now() - absl::Minutes(5));
  EXPECT_EQ(job().lifecycle().restarts, 4u);
  EXPECT_EQ(job().costs().failures(), 2);
  EXPECT_EQ(job().last_heard(), now());  // waits --job-retention for its agents
  // Exposure goes on from now: the time the supervisor was down is nobody's.
  EXPECT_DOUBLE_EQ(job().costs().ExposureSeconds(now()), 100);
  EXPECT_DOUBLE_EQ(job().costs().ExposureSeconds(now() + absl::Seconds(10)), 110);
}

TEST_F(StateRestoreTest, EndedJobLeavesAtTheFirstSweepAndAStoppedOneGoesOn) {
  PersistedState ended;
  ended.jobs.push_back(Row("finished"));
  Restore(ended);
  EXPECT_EQ(job().lifecycle().state, JobState::kFinished);
  EXPECT_EQ(job().last_heard(), now() - absl::Minutes(5));  // when it ended, not now

  PersistedState stopping;
  JobRow row = Row("stopping");
  row.job = "other";
  stopping.jobs.push_back(row);
  Restore(stopping);
  const JobEntry* other = jobs_.Find("other");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->lifecycle().state, JobState::kStopping);
  EXPECT_EQ(other->lifecycle().stop_deadline, now() + options_.stop_timeout);
  EXPECT_EQ(other->lifecycle().restart_at, now());
}

TEST_F(StateRestoreTest, RestartsCountTowardTheCapUntilAnOperatorResumed) {
  PersistedState s;
  s.jobs.push_back(Row("running"));
  for (int i = 1; i <= options_.restart.limit; ++i) {
    s.restarts.push_back({now() - absl::Minutes(i), "job", 0, 1, "crash"});
  }
  Restore(s);
  EXPECT_FALSE(job().lifecycle().governor.Decide(now()).allowed);

  // A store written before resumes were kept with the job has the event only.
  Event resumed;
  resumed.id = 7;
  resumed.time = now() - absl::Seconds(30);
  resumed.kind = EventKind::kResume;
  resumed.job = "job";
  s.events.push_back(resumed);
  jobs_.Erase("job");
  Restore(s);
  EXPECT_TRUE(job().lifecycle().governor.Decide(now()).allowed);
}

TEST_F(StateRestoreTest, PendingFenceRunsAgainOnlyWhileTheNodeNeedsIt) {
  PersistedState s;
  s.nodes.push_back({"node-c", true, "bad disk", now() - absl::Minutes(30), "operator"});
  s.fences.push_back({"node-c", "bad disk", now() - absl::Minutes(30)});
  s.fences.push_back({"node-d", "bad nic", now() - absl::Minutes(30)});  // since unquarantined

  Restore(s);

  const SupervisorOutput out = decisions_.Take();
  ASSERT_EQ(out.fences.size(), 1u);
  EXPECT_EQ(out.fences[0].node, "node-c");
  EXPECT_EQ(out.fences[0].action, FenceAction::kFence);
  ASSERT_EQ(out.journal.fences.size(), 2u);
  EXPECT_EQ(out.journal.fences[1].node, "node-d");
  EXPECT_FALSE(out.journal.fences[1].pending);  // dropped from the store
}

TEST_F(StateRestoreTest, EventsComeBackAndNewOnesContinueTheirIds) {
  PersistedState s;
  for (uint64_t id : {7u, 8u}) {
    Event e;
    e.id = id;
    e.time = now() - absl::Minutes(1);
    e.kind = EventKind::kStall;
    e.job = "job";
    s.events.push_back(e);
  }

  Restore(s);

  EXPECT_EQ(decisions_.events().size(), 2u);
  Event next;
  next.kind = EventKind::kPersistFailed;
  EXPECT_EQ(decisions_.Emit(nullptr, next).id, 9u);
}

}  // namespace
}  // namespace trainsup
