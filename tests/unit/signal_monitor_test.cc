// The training signals of a whole job (SignalMonitor), fed by a real Job
// the way the supervisor feeds it: a synthetic data-parallel run of 8 ranks
// on 2 nodes, healthy unless a test makes it misbehave. The negative
// controls come first: a rule that pages on a healthy run gets switched off.
#include "daemon/core/signals/signal_monitor.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/heartbeat.h"
#include "daemon/core/job.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_agents.h"

namespace trainsup {
namespace {

using ::testing::DoubleNear;
using ::testing::Gt;
using ::testing::Optional;
using ::trainsup::testing::Figure;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;
constexpr uint32_t kWorld = 8;
constexpr uint32_t kPerNode = 4;

// Everything the rules found over a run: the job-stopping rules' typed
// findings, and the registry's as their events and actions.
struct Found {
  std::vector<NonFiniteFinding> non_finite;
  std::vector<LossShiftFinding> loss_shift;
  std::vector<ResumeFindings> resume;
  std::vector<SignalFinding> findings;
  size_t total() const {
    return non_finite.size() + loss_shift.size() + resume.size() + findings.size();
  }
  // The registry's findings of `kinds`, in order.
  std::vector<SignalFinding> Of(std::initializer_list<EventKind> kinds) const {
    std::vector<SignalFinding> out;
    for (const SignalFinding& f : findings) {
      for (EventKind kind : kinds) {
        if (f.event.kind == kind) out.push_back(f);
      }
    }
    return out;
  }
  std::vector<SignalFinding> throughput() const {
    return Of({EventKind::kThroughputChange, EventKind::kThroughputDecay});
  }
};

// What a rank sends at a step; a test's `tweak` changes it.
struct RankStep {
  uint32_t rank = 0;
  int64_t step = 0;
  Heartbeat hb;
};

// A healthy data-parallel job: a pretraining loss curve with noise (the
// same mean on every rank), log-normal gradient norms, 0.5s steps of which
// 0.4s compute, with noise, the caching allocator filling over the first 40
// steps, host RSS with noise, every replica's digest equal; a generation's
// first 20 steps 3x slower (start-up), and fp16 overflow steps now and then.
class SyntheticJob {
 public:
  explicit SyntheticJob(const SignalOptions& options, uint32_t seed = 1)
      : monitor_(options), job_("job", 16, 16), rng_(seed) {
    job_.set_step_observer(&monitor_);
    job_.ObserveGeneration(now_, 1);
  }

  // A new generation, `idle` after the last step (stop, backoff, relaunch).
  void Restart(absl::Duration idle) {
    now_ += idle;
    job_.ObserveGeneration(now_, job_.generation() + 1);
    generation_first_step_ = -1;
  }

  // A rank's START carrying the script's settings.
  void Start(std::vector<std::pair<std::string, double>> settings) {
    Heartbeat hb = Base(0, 0);
    hb.kind = HeartbeatKind::kStart;
    hb.signal_settings = std::move(settings);
    (void)job_.Apply(now_, 0, hb);
    monitor_.OnStart(job_, hb);
  }

  // Every rank's START, as its helper sends it before the first step.
  void StartRanks(uint32_t world_size = kWorld) {
    for (uint32_t r = 0; r < kWorld; ++r) {
      Heartbeat hb = Base(r, 0);
      hb.kind = HeartbeatKind::kStart;
      hb.world_size = world_size;
      (void)job_.Apply(now_, r / kPerNode, hb);
    }
  }

  // Every rank completes `step` (a checkpoint after it every 200 steps),
  // then the supervisor sweeps once a second.
  void Step(int64_t step, const std::function<void(RankStep&)>& tweak = nullptr) {
    if (generation_first_step_ < 0) generation_first_step_ = step;
    const bool warm_up = step - generation_first_step_ < 20;
    const double step_s = (warm_up ? 1.5 : 0.5) * (1 + 0.03 * noise_(rng_));
    const bool overflow = step - generation_first_step_ < 8 || uniform_(rng_) < 0.01;
    const double loss = 2.0 + 6.0 * std::exp(-step / 400.0);
    const double spread = 1 + 0.03 * noise_(rng_);
    const double grad = (1.0 + 20 * std::exp(-step / 50.0)) * std::exp(0.3 * noise_(rng_));
    now_ += absl::Seconds(step_s);
    for (uint32_t r = 0; r < kWorld; ++r) {
      RankStep rs{r, step, Base(r, step)};
      Heartbeat& hb = rs.hb;
      hb.step_duration_s = step_s + checkpoint_s_;
      hb.compute_s = (warm_up ? 1.2 : 0.4) * (1 + 0.02 * noise_(rng_));
      hb.loss = loss * spread * (1 + 0.05 * noise_(rng_));
      hb.learning_rate = 3e-4;
      hb.grad_norm = overflow ? std::numeric_limits<double>::infinity() : grad;
      hb.samples = 8;
      hb.device_memory_bytes = static_cast<uint64_t>(
          30 * kGiB * std::min(1.0, (step - generation_first_step_ + 1) / 40.0) +
          50 * kMiB * std::abs(noise_(rng_)));
      hb.device_memory_capacity_bytes = static_cast<uint64_t>(80 * kGiB);
      hb.host_rss_bytes = static_cast<uint64_t>(6 * kGiB + 30 * kMiB * noise_(rng_));
      hb.replica_digest = static_cast<uint64_t>(step) * 2654435761u;
      if (tweak) tweak(rs);
      (void)job_.Apply(now_, r / kPerNode, hb);
    }
    checkpoint_s_ = 0;
    if (step % 200 == 199) Checkpoint(step, 30.0);
    if (now_ - last_sweep_ >= absl::Seconds(1)) Sweep();
  }

  // Steps [from, to).
  void Steps(int64_t from, int64_t to, const std::function<void(RankStep&)>& tweak = nullptr) {
    for (int64_t step = from; step < to; ++step) Step(step, tweak);
  }

  void Sweep() {
    last_sweep_ = now_;
    auto node_name = [this](NodeIndex node) -> const std::string& {
      return node < names_.size() ? names_[node] : no_name_;
    };
    const SignalSweep sweep{now_, job_, EventJob{"job", job_.generation()}, node_name};
    SignalFindings f = monitor_.Sweep(sweep);
    if (f.non_finite) found_.non_finite.push_back(*f.non_finite);
    if (f.loss_shift) found_.loss_shift.push_back(*f.loss_shift);
    if (f.resume.any()) found_.resume.push_back(f.resume);
    for (SignalFinding& finding : f.findings) found_.findings.push_back(std::move(finding));
  }

  // `ranks` of the job's ranks end a checkpoint of `step` (no blocking time).
  void EndCheckpoint(int64_t step, uint32_t ranks) {
    for (uint32_t r = 0; r < ranks; ++r) {
      Heartbeat hb = Base(r, step);
      hb.kind = HeartbeatKind::kCheckpointEnd;
      (void)job_.Apply(now_, r / kPerNode, hb);
      monitor_.OnCheckpoint(job_, hb);
    }
  }

  // Rank `rank` reports the save of `step` failed with `error` (blocking
  // seconds 0: a background write that failed after its checkpoint ended).
  void FailCheckpoint(int64_t step, uint32_t rank, const std::string& error) {
    Heartbeat hb = Base(rank, step);
    hb.kind = HeartbeatKind::kCheckpointEnd;
    hb.exception_type = "OSError";
    hb.exception_message = error;
    (void)job_.Apply(now_, rank / kPerNode, hb);
    monitor_.OnCheckpoint(job_, hb);
  }

  const Found& found() const { return found_; }
  const SignalMonitor& monitor() const { return monitor_; }
  absl::Time now() const { return now_; }

 private:
  Heartbeat Base(uint32_t rank, int64_t step) const {
    Heartbeat hb;
    hb.kind = HeartbeatKind::kStep;
    hb.rank = rank;
    hb.local_rank = rank % kPerNode;
    hb.world_size = kWorld;
    hb.step = step;
    hb.generation = job_.generation();
    return hb;
  }

  // Every rank blocks `seconds` saving after `step`.
  void Checkpoint(int64_t step, double seconds) {
    for (uint32_t r = 0; r < kWorld; ++r) {
      Heartbeat hb = Base(r, step);
      hb.kind = HeartbeatKind::kCheckpointBegin;
      (void)job_.Apply(now_, r / kPerNode, hb);
    }
    now_ += absl::Seconds(seconds);
    for (uint32_t r = 0; r < kWorld; ++r) {
      Heartbeat hb = Base(r, step);
      hb.kind = HeartbeatKind::kCheckpointEnd;
      hb.checkpoint_blocking_s = seconds;
      (void)job_.Apply(now_, r / kPerNode, hb);
      monitor_.OnCheckpoint(job_, hb);  // as the supervisor tells it
    }
    checkpoint_s_ = seconds;  // the next step's measured duration holds it
  }

  SignalMonitor monitor_;
  Job job_;
  const std::vector<std::string> names_ = {"node-0", "node-1"};
  const std::string no_name_;
  absl::Time now_ = absl::FromUnixSeconds(1'700'000'000);
  absl::Time last_sweep_ = now_;
  int64_t generation_first_step_ = -1;
  double checkpoint_s_ = 0;
  std::mt19937 rng_;
  std::normal_distribution<double> noise_{0.0, 1.0};
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  Found found_;
};

// Options for runs of a few thousand 0.5s steps: a throughput change must
// hold 10 s (the default minute is 120 such steps; the rule is the same).
SignalOptions TestOptions() {
  SignalOptions o;
  o.throughput.confirm_time = absl::Seconds(10);
  return o;
}

// ---- Negative controls ----

TEST(SignalMonitorTest, AHealthyNoisyRunRaisesNothing) {
  // Warm-up, checkpoint pauses of 30s every 200 steps, fp16 overflow steps
  // (8 in a row at the start, then 1%), noise everywhere.
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    SyntheticJob job(TestOptions(), seed);
    job.Steps(0, 3000);
    EXPECT_EQ(job.found().total(), 0u) << "seed " << seed;
    EXPECT_GT(job.monitor().overflow_steps(), 8u);
    EXPECT_EQ(job.monitor().nonfinite_loss_steps(), 0u);
  }
}

TEST(SignalMonitorTest, ARestartsIdleTimeAndAResumeAtAnotherLevelRaiseNothing) {
  SyntheticJob job(TestOptions(), 11);
  job.Steps(0, 990);
  // Failed at step 989; the last checkpoint was after step 799. Two minutes
  // of stop, backoff and relaunch, then generation 2 redoes 800..989 from
  // a loss above where generation 1 ended (and below its start), correctly
  // restored: no resume finding either.
  job.Restart(absl::Minutes(2));
  job.Steps(800, 2000);
  EXPECT_EQ(job.found().total(), 0u);
  EXPECT_EQ(job.monitor().last_checkpoint_step(), 1999);
  // The generation before is still readable, for comparing the resume.
  const GenerationRecord& before = job.monitor().previous_record();
  EXPECT_EQ(before.generation(), 1u);
  EXPECT_EQ(before.last_step(), 989);
  std::optional<StepSummary> at = before.Find(900);
  ASSERT_TRUE(at.has_value());
  EXPECT_NEAR(*at->loss, 2.0 + 6.0 * std::exp(-900 / 400.0), 0.2);
  EXPECT_EQ(at->samples, 64u);
  EXPECT_EQ(at->ranks, kWorld);
  EXPECT_DOUBLE_EQ(*at->learning_rate, 3e-4);
}

TEST(SignalMonitorTest, TheGenerationsFirstStepIsKeptForItsProvenance) {
  SyntheticJob job(TestOptions(), 15);
  EXPECT_FALSE(job.monitor().first_step().has_value());
  job.StartRanks();
  job.Steps(0, 300);
  std::optional<StepSummary> first = job.monitor().first_step();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(job.monitor().record().generation(), 1u);
  EXPECT_EQ(first->step, 0);
  EXPECT_DOUBLE_EQ(*first->learning_rate, 3e-4);
  EXPECT_EQ(first->samples, 64u);  // 8 a rank, summed
  EXPECT_EQ(first->ranks, kWorld);
  job.Restart(absl::Seconds(30));
  job.StartRanks();
  job.Steps(200, 210, [](RankStep& rs) {
    rs.hb.learning_rate = 1e-4;
    rs.hb.tokens = 1024;
  });
  first = job.monitor().first_step();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(job.monitor().record().generation(), 2u);
  EXPECT_EQ(first->step, 200);  // the resume's, not a later one
  EXPECT_DOUBLE_EQ(*first->learning_rate, 1e-4);
  EXPECT_EQ(first->tokens, 1024u * kWorld);
}

TEST(SignalMonitorTest, AFirstStepHandedOverWithoutEveryRankIsPassedOverForOneWithThemAll) {
  // No START before the steps: the first step is handed over with the one
  // rank heard so far; the next one has them all.
  SyntheticJob job(TestOptions(), 16);
  job.Steps(0, 20);
  std::optional<StepSummary> first = job.monitor().first_step();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->step, 1);
  EXPECT_EQ(first->ranks, kWorld);
  EXPECT_EQ(first->samples, 64u);
  // Ranks that never all report: the first of the first steps with the most.
  job.Restart(absl::Seconds(30));
  job.StartRanks(kWorld + 1);  // one rank that never reports
  job.Steps(100, 120, [](RankStep& rs) { rs.hb.world_size = kWorld + 1; });
  first = job.monitor().first_step();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->step, 100);
  EXPECT_EQ(first->ranks, kWorld);
}

TEST(SignalMonitorTest, RestartsThatNeverStepRaiseNoResumeFinding) {
  // Two generations that fail before their first step (idle: launched,
  // nothing done), then one that resumes correctly from the checkpoint of
  // step 399: it is compared with generation 1, the last that stepped.
  SyntheticJob job(TestOptions(), 13);
  job.Steps(0, 450);
  job.Restart(absl::Minutes(1));
  job.Restart(absl::Minutes(1));
  job.Restart(absl::Minutes(1));
  job.Steps(400, 600);
  EXPECT_EQ(job.found().total(), 0u);
  EXPECT_EQ(job.monitor().previous_record().generation(), 1u);
}

TEST(SignalMonitorTest, ACorrectResumeAtALowerLossThanTheStartRaisesNothing) {
  SyntheticJob job(TestOptions(), 12);
  job.Steps(0, 300);
  job.Restart(absl::Seconds(30));
  job.Steps(5000, 6000);  // resumed late in training: a flat, low loss
  EXPECT_EQ(job.found().total(), 0u);
}

// ---- Each signal, found and attributed ----

TEST(SignalMonitorTest, AResumeFromAnOlderCheckpointIsBehindTheLastComplete) {
  SyntheticJob job(TestOptions(), 14);
  job.Steps(0, 450);  // checkpoints after steps 199 and 399
  EXPECT_EQ(job.monitor().last_checkpoint_step(), 399);
  job.Restart(absl::Minutes(1));
  job.Steps(200, 260);  // loaded 199's
  ASSERT_EQ(job.found().resume.size(), 1u);
  const ResumeFindings& f = job.found().resume[0];
  ASSERT_TRUE(f.behind);
  EXPECT_EQ(f.behind->resumed_step, 199);
  EXPECT_EQ(f.behind->checkpoint_step, 399);
  EXPECT_EQ(f.behind->repeated_steps, 200);
  EXPECT_FALSE(f.lr || f.data || f.spike);
  EXPECT_EQ(job.monitor().resume_counts().behind, 1u);
  EXPECT_EQ(job.monitor().resume_counts().repeated_steps, 200u);
  EXPECT_EQ(job.found().total(), 1u);
}

TEST(SignalMonitorTest, ACheckpointIsCompleteOnlyWhenEveryRankEndedIt) {
  SyntheticJob job(TestOptions(), 15);
  job.Steps(0, 250);
  EXPECT_EQ(job.monitor().last_checkpoint_step(), 199);
  job.EndCheckpoint(249, kWorld - 1);  // one rank never finished saving
  EXPECT_EQ(job.monitor().last_checkpoint_step(), 199);
  job.Restart(absl::Minutes(1));
  job.Steps(200, 260);  // from 199's, the last complete one: correct
  EXPECT_EQ(job.found().total(), 0u);
}

TEST(SignalMonitorTest, AFailedSaveIsNeverCompleteAndIsReportedOnceNamingItsFirstRank) {
  SyntheticJob job(TestOptions(), 16);
  job.Steps(0, 250);
  ASSERT_EQ(job.monitor().last_checkpoint_step(), 199);
  // Every rank's save of 249 fails (a shared file system full): no
  // checkpoint, and one event, not eight.
  for (uint32_t r = 0; r < kWorld; ++r) job.FailCheckpoint(249, r, "No space left on device");
  job.Sweep();
  EXPECT_EQ(job.monitor().last_checkpoint_step(), 199);
  ASSERT_EQ(job.found().total(), 1u);
  const Event& e = job.found().findings[0].event;
  EXPECT_EQ(e.kind, EventKind::kCheckpointFailed);
  EXPECT_EQ(e.rank, 0u);
  EXPECT_EQ(e.node, "node-0");
  EXPECT_THAT(e.message, ::testing::HasSubstr("OSError: No space left on device"));
  EXPECT_THAT(Figure(e, "last_checkpoint_step"), Optional(199.0));
  // A background write of 399 that failed after every rank ended its save:
  // 399 is taken back, and 199 is the last committed one again.
  job.Steps(250, 420);
  ASSERT_EQ(job.monitor().last_checkpoint_step(), 399);
  job.FailCheckpoint(399, 5, "upload: 503");
  job.Sweep();
  EXPECT_EQ(job.monitor().last_checkpoint_step(), 199);
  ASSERT_EQ(job.found().total(), 2u);
  EXPECT_EQ(job.found().findings[1].event.rank, 5u);
  EXPECT_EQ(job.found().findings[1].event.node, "node-1");
}

TEST(SignalMonitorTest, ALossSpikeAtTheResumeIsAFactNamingTheCheckpointLoaded) {
  SyntheticJob job(TestOptions(), 16);
  job.Steps(0, 450);
  job.Restart(absl::Minutes(1));
  // The optimizer state did not load: from the second step the loss is 1.5
  // above the same steps', decaying; the learning rate restarted too.
  job.Steps(400, 460, [](RankStep& rs) {
    if (rs.step > 400) *rs.hb.loss += 1.5 * std::exp(-(rs.step - 401) / 20.0);
    rs.hb.learning_rate = 1e-3;
  });
  ASSERT_EQ(job.found().resume.size(), 1u);
  const ResumeFindings& f = job.found().resume[0];
  ASSERT_TRUE(f.spike);
  ASSERT_TRUE(f.lr);
  EXPECT_FALSE(f.behind || f.data);
  EXPECT_EQ(f.lr->step, 400);
  const std::optional<ResumeSpikeFinding>& fact = job.monitor().resume_spike();
  ASSERT_TRUE(fact.has_value());
  EXPECT_EQ(fact->generation, 2u);
  EXPECT_EQ(fact->resumed_step, 399);
  EXPECT_EQ(fact->step, 407);
  EXPECT_EQ(job.monitor().resume_counts().spike, 1u);
  EXPECT_EQ(job.monitor().resume_counts().lr, 1u);
}

TEST(SignalMonitorTest, TheScriptCanSwitchTheResumeChecksOff) {
  SyntheticJob job(TestOptions(), 17);
  job.Steps(0, 450);
  job.Restart(absl::Minutes(1));
  job.Start({{"resumed_behind", 0}, {"lr_mismatch", 0}});
  job.Steps(200, 260, [](RankStep& rs) { rs.hb.learning_rate = 1e-3; });
  EXPECT_EQ(job.found().total(), 0u);
}

TEST(SignalMonitorTest, ANaNLossNamesItsRankNodeAndStep) {
  SyntheticJob job(TestOptions());
  job.Steps(0, 700);
  job.Steps(700, 705, [](RankStep& rs) {
    if (rs.rank == 5 || rs.step > 700) rs.hb.loss = std::numeric_limits<double>::quiet_NaN();
  });
  ASSERT_EQ(job.found().non_finite.size(), 1u);
  const NonFiniteFinding& f = job.found().non_finite[0];
  EXPECT_EQ(f.step, 700);
  ASSERT_EQ(f.ranks.size(), 1u);
  EXPECT_EQ(f.ranks[0].rank, 5u);
  EXPECT_EQ(f.ranks[0].node, 1u);
  EXPECT_EQ(job.found().total(), 1u);
}

TEST(SignalMonitorTest, OneSlowerNodeIsNamed) {
  SyntheticJob job(TestOptions());
  job.Steps(0, 300);
  // Node 1's ranks compute 20% slower; the job waits for them.
  job.Steps(300, 700, [](RankStep& rs) {
    if (rs.rank / kPerNode == 1) *rs.hb.compute_s *= 1.2;
    rs.hb.step_duration_s *= 1.16;
  });
  ASSERT_FALSE(job.found().throughput().empty());
  const Event& s = job.found().throughput()[0].event;
  EXPECT_EQ(s.node, "node-1");
  // The node's own move: alone, or named by the job's (both began at 300).
  const bool job_step_time = Figure(s, "job_step_time") == 1;
  EXPECT_THAT(Figure(s, job_step_time ? "node_ratio" : "ratio"), Optional(DoubleNear(1.2, 0.03)));
  EXPECT_THAT(Figure(s, "onset_step"), Optional(DoubleNear(300, 3)));
  EXPECT_EQ(s.kind, EventKind::kThroughputChange);  // a step change, no decay
  for (const SignalFinding& other : job.found().throughput()) {
    EXPECT_EQ(other.event.node, "node-1");
    EXPECT_EQ(other.action, SignalAction::kReport);
  }
}

// The job's step time can confirm its slowdown a sweep or two before the
// node's own compute does (CI: a node slowed by a fifth was reported as the
// job's change naming no node, its own finding a moment later). A job's
// finding while one node's compute is building waits for it.
TEST(SignalMonitorTest, AJobsSlowdownConfirmedBeforeItsOneSlowNodeStillNamesIt) {
  SyntheticJob job(TestOptions());
  job.Steps(0, 300);
  job.Steps(300, 700, [](RankStep& rs) {
    if (rs.rank / kPerNode == 1 && rs.step >= 304) *rs.hb.compute_s *= 1.2;
    rs.hb.step_duration_s *= 1.16;
  });
  ASSERT_FALSE(job.found().throughput().empty());
  const Event& s = job.found().throughput()[0].event;
  EXPECT_EQ(Figure(s, "job_step_time"), 1);
  EXPECT_EQ(s.node, "node-1");
  EXPECT_THAT(Figure(s, "node_ratio"), Optional(DoubleNear(1.2, 0.03)));
  for (const SignalFinding& other : job.found().throughput()) {
    EXPECT_EQ(other.event.node, "node-1");
  }
}

// The negative side of the wait above: a slowdown no node's compute shares
// (the collective, the input) is still reported, naming no node.
TEST(SignalMonitorTest, AJobsOwnSlowdownNamesNoNodeOnceTheWaitForOneEnds) {
  SyntheticJob job(TestOptions());
  job.Steps(0, 300);
  job.Steps(300, 700, [](RankStep& rs) { rs.hb.step_duration_s *= 1.2; });
  ASSERT_EQ(job.found().throughput().size(), 1u);
  const Event& s = job.found().throughput()[0].event;
  EXPECT_EQ(Figure(s, "job_step_time"), 1);
  EXPECT_EQ(s.node, "");
  EXPECT_EQ(Figure(s, "nodes_moving"), 0);
  EXPECT_THAT(Figure(s, "ratio"), Optional(DoubleNear(1.2, 0.03)));
}

TEST(SignalMonitorTest, EveryNodeSlowingTogetherIsTheJobsChangeNamingNoNode) {
  SyntheticJob job(TestOptions());
  job.Steps(0, 300);
  job.Steps(300, 700, [](RankStep& rs) {
    *rs.hb.compute_s *= 1.3;
    rs.hb.step_duration_s *= 1.25;
  });
  ASSERT_EQ(job.found().throughput().size(), 1u);
  const Event& s = job.found().throughput()[0].event;
  EXPECT_EQ(Figure(s, "job_step_time"), 1);
  EXPECT_EQ(s.node, "");
  EXPECT_EQ(Figure(s, "nodes_moving"), 2);
  EXPECT_THAT(Figure(s, "ratio"), Optional(DoubleNear(1.25, 0.03)));
}

TEST(SignalMonitorTest, ACorruptedReplicaIsNamed) {
  SyntheticJob job(TestOptions());
  job.Steps(0, 300);
  job.Steps(300, 320, [](RankStep& rs) {
    if (rs.rank == 6) rs.hb.replica_digest = *rs.hb.replica_digest ^ 1;
  });
  // Every step disagrees; one finding per node, charged to it.
  const std::vector<SignalFinding> replica = job.found().Of({EventKind::kReplicaMismatch});
  ASSERT_EQ(replica.size(), 1u);
  const SignalFinding& f = replica[0];
  EXPECT_EQ(Figure(f.event, "step"), 300);
  EXPECT_EQ(f.event.rank, 6u);
  EXPECT_EQ(f.event.node, "node-1");
  EXPECT_EQ(Figure(f.event, "majority"), 7);
  EXPECT_EQ(Figure(f.event, "charged"), 1);
  EXPECT_EQ(f.action, SignalAction::kChargeNode);
  EXPECT_EQ(f.node, 1u);
  EXPECT_EQ(f.failure, "rank 6 disagreed with its replica group 0 at step 300");
  EXPECT_EQ(job.monitor().replica_mismatches(), 20u);
}

TEST(SignalMonitorTest, AHostMemoryLeakOnOneRankIsNamedWithItsSlope) {
  SyntheticJob job(TestOptions());
  job.Steps(0, 600, [](RankStep& rs) {
    if (rs.rank == 2) *rs.hb.host_rss_bytes += static_cast<uint64_t>(rs.step * 1.0 * kMiB);
  });
  const std::vector<SignalFinding> memory = job.found().Of({EventKind::kMemoryGrowth});
  ASSERT_EQ(memory.size(), 1u);
  const Event& f = memory[0].event;
  EXPECT_EQ(Figure(f, "host_memory"), 1);
  EXPECT_EQ(f.rank, 2u);
  EXPECT_EQ(f.node, "node-0");
  EXPECT_THAT(Figure(f, "slope_bytes_per_step"), Optional(DoubleNear(1.0 * kMiB, 0.1 * kMiB)));
  EXPECT_THAT(Figure(f, "slope_bytes_per_second"), Optional(Gt(1.0 * kMiB)));
}

TEST(SignalMonitorTest, ALossThatJumpsAndStaysIsAShift) {
  SyntheticJob job(TestOptions());
  job.Steps(0, 1500);
  job.Steps(1500, 1600, [](RankStep& rs) { *rs.hb.loss *= 1.4; });
  ASSERT_EQ(job.found().loss_shift.size(), 1u);
  EXPECT_NEAR(job.found().loss_shift[0].onset_step, 1500, 2);
  EXPECT_TRUE(job.monitor().loss_shifted());
}

TEST(SignalMonitorTest, TheScriptsSettingsApplyToItsJob) {
  SyntheticJob job(TestOptions());
  job.Start({{"loss_shift", 0}, {"replica_rearm_steps", 5}});
  EXPECT_FALSE(job.monitor().options().loss_shift.enabled);
  EXPECT_EQ(job.monitor().settings().size(), 2u);
  job.Steps(0, 1500);
  job.Steps(1500, 1600, [](RankStep& rs) {
    *rs.hb.loss *= 1.4;
    if (rs.rank == 6 && rs.step < 1512) rs.hb.replica_digest = 1;
  });
  EXPECT_TRUE(job.found().loss_shift.empty());
  EXPECT_EQ(job.found().Of({EventKind::kReplicaMismatch}).size(), 3u);  // steps 1500, 1505, 1510
  // The next generation starts from trainsupd's options until its START.
  job.Restart(absl::Seconds(10));
  job.Step(1400);
  EXPECT_TRUE(job.monitor().options().loss_shift.enabled);
}

}  // namespace
}  // namespace trainsup
