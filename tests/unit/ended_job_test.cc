// What an ended job showed comes back when the supervisor restarts
// (daemon/core/ended_job.h, state_restore.h). A job is driven to its end
// through Hello/Report/Sweep in fake time, what the supervisor journaled is
// kept as the state store keeps it, and a new supervisor restored from it at
// the same time must show the same job, ranks and nodes: every figure the
// adapters render (the views, the job's observations, lifecycle, costs,
// plans, ledger and event counts, each rank, each node).
#include <cstdint>
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "daemon/core/ended_job.h"
#include "daemon/core/job_view.h"
#include "daemon/core/journal.h"
#include "daemon/core/supervisor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_agents.h"
#include "tests/support/test_time.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;
using ::trainsup::testing::FakeAgentsOptions;
using ::trainsup::testing::FakeAgentsTest;

using ::trainsup::testing::AtS;

std::string Str(absl::Time t) { return absl::FormatTime(t); }

// `journal` kept as the state store keeps it (state_store.h): the latest row
// of a node, job, measure, pending fence, ended job, ended node and rank;
// every failure, restart, event and stack; an ended job's row replaces its
// picture.
void Keep(const Journal& journal, PersistedState& stored) {
  auto upsert = [](auto& rows, const auto& row, auto key) {
    for (auto& r : rows) {
      if (key(r) == key(row)) {
        r = row;
        return;
      }
    }
    rows.push_back(row);
  };
  for (const NodeRecordRow& r : journal.nodes) {
    upsert(stored.nodes, r, [](auto& x) { return x.name; });
  }
  for (const JobRow& r : journal.jobs) upsert(stored.jobs, r, [](auto& x) { return x.job; });
  for (const JobMeasuresRow& r : journal.measures) {
    upsert(stored.measures, r, [](auto& x) { return x.job; });
  }
  for (const FenceRow& r : journal.fences) upsert(stored.fences, r, [](auto& x) { return x.node; });
  stored.failures.insert(stored.failures.end(), journal.failures.begin(), journal.failures.end());
  stored.restarts.insert(stored.restarts.end(), journal.restarts.begin(), journal.restarts.end());
  stored.events.insert(stored.events.end(), journal.events.begin(), journal.events.end());
  stored.stacks.insert(stored.stacks.end(), journal.stacks.begin(), journal.stacks.end());
  for (const EndedJobRow& r : journal.ended_jobs) {
    upsert(stored.ended_jobs, r, [](auto& x) { return x.job; });
    auto of_job = [&](const auto& x) { return x.job == r.job; };
    stored.ended_nodes.erase(
        std::remove_if(stored.ended_nodes.begin(), stored.ended_nodes.end(), of_job),
        stored.ended_nodes.end());
    stored.ended_ranks.erase(
        std::remove_if(stored.ended_ranks.begin(), stored.ended_ranks.end(), of_job),
        stored.ended_ranks.end());
  }
  for (const EndedNodeRow& r : journal.ended_nodes) {
    upsert(stored.ended_nodes, r, [](auto& x) { return std::make_pair(x.job, x.node); });
  }
  for (const EndedRankRow& r : journal.ended_ranks) {
    upsert(stored.ended_ranks, r, [](auto& x) { return std::make_pair(x.job, x.rank); });
  }
  std::map<std::pair<std::string, EventKind>, uint64_t> counts;
  for (const Event& e : stored.events) {
    if (!e.job.empty()) ++counts[{e.job, e.kind}];
  }
  stored.event_counts.clear();
  for (const auto& [key, count] : counts) {
    stored.event_counts.push_back({key.first, key.second, count});
  }
}

class EndedJobTest : public FakeAgentsTest {
 protected:
  void SetUp() override { options_ = FakeAgentsOptions(); }

  // What the supervisor journaled since the last call, into `stored_`.
  void Journaled() { Keep(sup_->TakeOutput().journal, stored_); }

  // Every rank of `session` completes `step`, each with its own step and
  // compute times, loss and learning rate.
  void Step(absl::Time now, SessionId session, int64_t step) {
    std::vector<Heartbeat> hbs;
    std::vector<RankProcessInfo> processes;
    for (uint32_t r : RanksOf(session)) {
      Heartbeat hb = Hb(HeartbeatKind::kStep, r, step);
      hb.step_duration_s = 1.0 + 0.125 * r + 0.0625 * (step % 3);
      hb.compute_s = 0.5 + 0.125 * r;
      hb.loss = 4.0 - 0.25 * step + r;
      hb.learning_rate = 0.001;
      hb.samples = 8;
      hbs.push_back(hb);
      processes.push_back(Alive(r));
    }
    Send(now, session, hbs, processes);
  }

  // A job of two generations: rank 0 crashes (SIGSEGV) at step 5 of the
  // first, the next runs 10 steps and every node exits 0; then the agents
  // leave. Returns when it is all over.
  absl::Time RunToTheEnd() {
    Create();
    ConnectAgents(AtS(0));
    SendStarted(AtS(1), a_);
    SendStarted(AtS(1), b_);
    double t = 2;
    for (int64_t step = 1; step <= 5; ++step, t += 1) {
      Step(AtS(t), a_, step);
      Step(AtS(t), b_, step);
      Sweep(AtS(t));
    }
    Journaled();
    Send(AtS(t), a_, {}, {Died(0, 0.5, 0, /*signal=*/11), Alive(1)});
    Sweep(AtS(t + 1));
    SendLauncherExit(AtS(t + 2), a_, 0, /*signal=*/15);
    SendLauncherExit(AtS(t + 2), b_, 0, /*signal=*/15);
    Sweep(AtS(t + 2));
    Sweep(AtS(t + 8));  // after the backoff: generation 2
    EXPECT_EQ(job().generation(), 2u);
    gen_ = job().generation();
    Journaled();
    t += 9;
    SendStarted(AtS(t), a_);
    SendStarted(AtS(t), b_);
    for (int64_t step = 6; step <= 15; ++step) {
      t += 1;
      Step(AtS(t), a_, step);
      Step(AtS(t), b_, step);
      Sweep(AtS(t));
    }
    t += 1;
    for (SessionId s : {a_, b_}) {
      std::vector<RankProcessInfo> exited;
      for (uint32_t r : RanksOf(s)) exited.push_back(Died(r, 0.25, 0));
      Send(AtS(t), s, {}, exited);
      SendLauncherExit(AtS(t + 0.5), s, 0);
    }
    Sweep(AtS(t + 1));
    EXPECT_EQ(state(), "finished");
    Journaled();
    // The agents' last word, then their streams end.
    Idle(AtS(t + 2));
    Disconnect(AtS(t + 2.5), a_);
    Disconnect(AtS(t + 3), b_);
    Journaled();
    return AtS(t + 10);
  }

  // Every figure the adapters render of job "job", its ranks and the nodes
  // (and the cluster's MTBF), as text at `now`.
  std::string Shown(absl::Time now) const {
    std::string out;
    const JobEntry* entry = sup_->FindEntry("job");
    if (entry == nullptr) return "no job";
    const Job& j = entry->job();
    const JobLifecycle& life = entry->lifecycle();
    const JobView view = *sup_->ViewOf("job", now);
    absl::StrAppend(&out, "state ", JobStateName(life.state), " (", life.reason, ") since ",
                    Str(life.since), " restarts ", life.restarts, "\n");
    absl::StrAppend(&out, "generation ", j.generation(), " world ", j.world_size(), " reporting ",
                    j.ranks_reporting(), " alive ", j.ranks_alive(), " step ", j.max_step(),
                    " progress ", Str(j.last_progress()), " heartbeats ", j.heartbeats_received(),
                    " stragglers ", entry->verdicts().straggler_ranks.size(), " batch ", j.global_batch(), "\n");
    absl::StrAppend(&out, "view p50 ", view.step_stats.median_rank_p50_s, " p99 ",
                    view.step_stats.median_rank_p99_s, " nodes ", view.nodes, " stall ",
                    view.stall_threshold ? absl::FormatDuration(*view.stall_threshold) : "none",
                    " C ", view.checkpoint_cost.seconds, view.checkpoint_cost.measured, " R ",
                    view.restart_cost.seconds, view.restart_cost.measured, " A ",
                    view.checkpoint_async_s, " next ", view.next_checkpoint_step, "\n");
    absl::StrAppend(&out, "signals loss_shifted ", view.signals.loss_shifted);
    for (const auto& [name, value] : view.signals.gauges) absl::StrAppend(&out, " ", name, " ", value);
    absl::StrAppend(&out, "\n");
    for (const MtbfEstimate& m : {view.mtbf, sup_->ClusterMtbf(now)}) {
      absl::StrAppend(&out, "mtbf ", m.failures, " failures over ", m.exposure_seconds, "s: ",
                      m.mtbf_seconds, " [", m.lower_seconds, ", ", m.upper_seconds, "]\n");
    }
    for (const CheckpointPlanSpec& p : entry->plans().plans()) {
      absl::StrAppend(&out, "plan ", p.plan_id, " ", p.anchor_step, " ", p.interval_steps, " ",
                      p.effective_from_step, "\n");
    }
    if (entry->plans().figures()) {
      const CheckpointPlan& f = *entry->plans().figures();
      absl::StrAppend(&out, "figures ", f.young_interval_seconds, " ", f.daly_interval_seconds,
                      " ", f.interval_seconds, " ", f.at_interval.total_waste_fraction, " ",
                      f.verdict_text, " ", absl::StrJoin(f.warnings, "; "), "\n");
    }
    absl::StrAppend(&out, "ledger ", absl::StrJoin(entry->ledger().totals().seconds, "/"), "\n");
    for (int k = 0; k < kEventKindCount; ++k) {
      const EventKind kind = static_cast<EventKind>(k);
      absl::StrAppend(&out, EventKindName(kind), "=", entry->event_count(kind), " ");
    }
    absl::StrAppend(&out, "\n");
    for (const auto& [i, r] : j.ranks()) {
      if (!r.seen) continue;
      const StepWindow::Quantiles step = r.step_durations.P50P99();
      const StepWindow::Quantiles compute = r.compute_durations.P50P99();
      absl::StrAppend(
          &out, "rank ", i, " on ",
          r.node < sup_->nodes().size() ? sup_->nodes()[r.node].name : "-", " local ", r.local_rank,
          " pid ", r.pid, " step ", r.step, " heard ", Str(r.last_heartbeat), " progress ",
          Str(r.last_progress), " heartbeats ", r.heartbeats,
          absl::StrFormat(" step %g/%g compute %g/%g", step.p50, step.p99, compute.p50,
                          compute.p99),
          " ", StepPhaseName(r.phase), " ", LivenessName(r.liveness), " exit ",
          r.death ? absl::StrCat(Str(r.death->time), " ", r.death->exit_code, "/",
                                 r.death->signal)
                  : "none",
          " loss ", r.loss.value_or(-1), " lr ", r.learning_rate.value_or(-1), " samples ",
          r.samples.value_or(0), " straggler ", entry->verdicts().straggler_ranks.count(i), "\n");
    }
    for (const NodeView& v : sup_->NodeViews()) {
      const NodeRecord& n = Node(v.name);
      absl::StrAppend(&out, "node ", n.name, " job ", n.job, " generation ", n.generation,
                      " connected ", n.connected, " command ", LauncherStateName(n.launcher.state),
                      " exit ", n.launcher.exit_code, "/", n.launcher.signal, " ranks ", v.ranks,
                      " report ", Str(n.last_report), " heartbeats ", n.heartbeats_received,
                      " incarnation ", n.incarnation, " quarantined ", v.quarantined, "\n");
    }
    return out;
  }

  const NodeRecord& Node(const std::string& name) const {
    for (const NodeRecord& n : sup_->nodes()) {
      if (n.name == name) return n;
    }
    static const NodeRecord* const kNone = new NodeRecord();
    ADD_FAILURE() << "no node " << name;
    return *kNone;
  }

  // A new supervisor, as after trainsupd restarted, restored at `now`.
  void Restart(absl::Time now) {
    Create();
    sup_->Restore(now, stored_);
  }

  PersistedState stored_;
};

TEST_F(EndedJobTest, AFinishedJobShowsAfterARestoreAllItShowedBefore) {
  const absl::Time end = RunToTheEnd();
  const std::string before = Shown(end);
  ASSERT_THAT(before, HasSubstr("state finished"));
  ASSERT_THAT(before, HasSubstr("restarts 1"));
  ASSERT_THAT(before, HasSubstr("world 4 reporting 4 alive 0 step 15"));
  ASSERT_THAT(before, HasSubstr("node node-b job job generation 2 connected 0 command exited"));

  Restart(end);
  EXPECT_EQ(Shown(end), before);
  // The sweeps that follow keep it as it was (nothing runs, nothing is
  // forgotten before --job-retention).
  sup_->Sweep(end + absl::Seconds(1));
  sup_->Sweep(end + absl::Hours(1));
  EXPECT_EQ(Shown(end), before);
  EXPECT_TRUE(sup_->TakeOutput().journal.empty());
}

TEST_F(EndedJobTest, TheNodesLastWordAfterTheEndIsWhatComesBack) {
  const absl::Time end = RunToTheEnd();
  // A node that said more after the end (its final report) and left: the
  // picture journaled at the end is not its last word.
  ASSERT_GT(Node("node-a").last_report, sup_->FindEntry("job")->lifecycle().since);
  const std::string before = Shown(end);
  Restart(end);
  EXPECT_EQ(Shown(end), before);
}

TEST_F(EndedJobTest, ARestoredEndedJobAndItsNodesLeaveAfterTheRetention) {
  const absl::Time end = RunToTheEnd();
  Restart(end);
  sup_->Sweep(end + options_.limits.job_retention + absl::Minutes(1));
  EXPECT_EQ(sup_->FindEntry("job"), nullptr);
  EXPECT_TRUE(sup_->nodes().empty());
}

TEST_F(EndedJobTest, APictureOfAnEarlierRunOfAJobRunningAgainIsNotRestored) {
  RunToTheEnd();
  // Run again by new agents: generation 3 runs when the supervisor restarts.
  for (JobRow& row : stored_.jobs) {
    row.generation = 3;
    row.state = "running";
  }
  Restart(AtS(100));
  EXPECT_EQ(job().generation(), 3u);
  EXPECT_EQ(job().ranks_reporting(), 0u);
  EXPECT_EQ(job().world_size(), 0u);
  EXPECT_EQ(sup_->ViewOf("job", AtS(100))->nodes, 0u);
}

TEST_F(EndedJobTest, ANodeOfTwoEndedJobsComesBackInTheOneThatEndedLast) {
  PersistedState s;
  s.jobs.push_back({"early", 1, "finished", "", 2, AtS(10)});
  s.jobs.push_back({"late", 1, "failed", "", 2, AtS(20)});
  for (const char* job : {"late", "early"}) {  // as the store orders them: by name
    s.ended_jobs.push_back({job, 1, 2, 10, {}, std::nullopt});
    s.ended_nodes.push_back({job, "node-a", 1, 1, AtS(5), 5, "exited", 0, 0, 0});
  }
  s.ended_nodes.push_back({"early", "node-b", 1, 1, AtS(5), 5, "exited", 0, 0, 0});
  Create();
  sup_->Restore(AtS(30), s);
  EXPECT_EQ(Node("node-a").job, "late");
  EXPECT_EQ(Node("node-b").job, "early");
  EXPECT_EQ(sup_->ViewOf("late", AtS(30))->nodes, 1u);
  EXPECT_EQ(sup_->ViewOf("early", AtS(30))->nodes, 1u);
}

// The log's "N failure records" counts every kind read back; the MTBF counts
// the job-killing failures of the job's whole life, kept with its row.
TEST_F(EndedJobTest, TheMtbfCountsTheJobKillingFailuresKeptWithTheJobNotTheFailureRecords) {
  PersistedState s;
  JobRow row{"job", 2, "finished", "", 4, AtS(50)};
  row.exposure_seconds = 40;
  row.restarts = 3;
  row.failures = 2;  // one of them older than the records read back
  s.jobs.push_back(row);
  s.failures.push_back({AtS(10), "job", 1, "crash", "node-a", 0u, "crash of rank 0", true});
  s.failures.push_back({AtS(20), "job", 2, "straggler", "node-b", 3u, "straggling rank 3", true});
  s.failures.push_back({AtS(30), "job", 2, "straggler", "node-b", 3u, "straggling rank 3", true});
  Create();
  sup_->Restore(AtS(60), s);
  EXPECT_EQ(sup_->ViewOf("job", AtS(60))->mtbf.failures, 2);
  EXPECT_EQ(sup_->ClusterMtbf(AtS(60)).failures, 2);
  EXPECT_EQ(entry().lifecycle().restarts, 3u);
}

}  // namespace
}  // namespace trainsup
