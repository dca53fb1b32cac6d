// The whole /metrics text of a known state, checked against a golden file
// (as node_exporter does), so that every name, label and help text change is
// a reviewed diff. Regenerate: TRAINSUP_UPDATE_GOLDEN=1 ./metrics_golden_test
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "daemon/metrics.h"
#include "daemon/supervisor_host.h"
#include "prometheus/text_serializer.h"
#include "tests/support/null_channel.h"

namespace trainsup {
namespace {

Heartbeat StepHeartbeat(const std::string& job, uint32_t rank, uint32_t world, int64_t step,
                        double seconds) {
  Heartbeat hb;
  hb.kind = HeartbeatKind::kStep;
  hb.job = job;
  hb.rank = rank;
  hb.local_rank = rank;
  hb.world_size = world;
  hb.pid = 100 + rank;
  hb.step = step;
  hb.step_duration_s = seconds;
  hb.generation = 1;
  return hb;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Starts `job` on its own node with `ranks` ranks, each at step 1.
void StartJob(SupervisorHost& host, const std::string& job, uint32_t ranks) {
  AgentHelloInfo hello;
  hello.node = "node-" + job;
  hello.job = job;
  hello.incarnation = 1;
  hello.generation = 1;
  absl::StatusOr<Supervisor::HelloResult> session =
      host.Hello(hello, std::make_shared<testing::NullChannel>());
  ASSERT_TRUE(session.ok());
  NodeReportInfo report;
  report.generation = 1;
  for (uint32_t rank = 0; rank < ranks; ++rank) {
    report.heartbeats.push_back(StepHeartbeat(job, rank, ranks, 1, 0.1));
  }
  ASSERT_TRUE(host.Report(session->session, report).ok());
}

// The lines of `text` that start with `prefix`.
int CountLines(const std::string& text, const std::string& prefix) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

TEST(MetricsGoldenTest, PerRankSeriesAreCappedOverAllJobsAndTheOmittedCounted) {
  FakeClock clock(absl::FromUnixSeconds(1'800'000'000));
  SupervisorHost host(SupervisorOptions{}, &clock);
  StartJob(host, "a", 3);
  StartJob(host, "b", 3);  // 6 > the cap of 5 ranks: b is left out whole
  StartJob(host, "c", 2);  // fits in what a left
  StartJob(host, "d", 9);  // above the per-job cap
  MetricsOptions options;
  options.max_ranks_per_job = 8;
  options.max_ranks_total = 5;
  SupervisorCollector collector(&host, options);
  const std::string text = prometheus::TextSerializer().Serialize(collector.Collect());

  EXPECT_EQ(CountLines(text, "trainsup_rank_step{job_id=\"a\""), 3);
  EXPECT_EQ(CountLines(text, "trainsup_rank_step{job_id=\"b\""), 0);
  EXPECT_EQ(CountLines(text, "trainsup_rank_step{job_id=\"c\""), 2);
  EXPECT_EQ(CountLines(text, "trainsup_rank_step{job_id=\"d\""), 0);
  EXPECT_EQ(CountLines(text, "trainsup_rank_series_omitted{cap=\"max_ranks_per_job\"} 9"), 1)
      << text;
  EXPECT_EQ(CountLines(text, "trainsup_rank_series_omitted{cap=\"max_ranks_total\"} 3"), 1)
      << text;
  EXPECT_EQ(CountLines(text, "trainsup_job_step{job_id=\"b\"} 1"), 1);  // aggregates stay
}

TEST(MetricsGoldenTest, ExpositionOfAKnownStateMatchesTheGoldenFile) {
  // The clock starts early enough for a job to hang and be judged stalled
  // before the others report at 1'800'000'000.
  constexpr absl::Duration kHang = absl::Seconds(30);
  FakeClock clock(absl::FromUnixSeconds(1'800'000'000) - kHang);
  SupervisorHost host(SupervisorOptions{}, &clock);

  // A job whose rank 1 stops before step 3 while rank 0 finished it: stalled,
  // with rank 1 on node-c its suspected culprit.
  AgentHelloInfo hello;
  hello.node = "node-c";
  hello.job = "hung";
  hello.incarnation = 1;
  hello.generation = 1;
  absl::StatusOr<Supervisor::HelloResult> session =
      host.Hello(hello, std::make_shared<testing::NullChannel>());
  ASSERT_TRUE(session.ok());
  NodeReportInfo hung;
  hung.generation = 1;
  for (int step = 1; step <= 3; ++step) {
    hung.heartbeats.push_back(StepHeartbeat("hung", 0, 2, step, 0.1));
    if (step < 3) hung.heartbeats.push_back(StepHeartbeat("hung", 1, 2, step, 0.1));
  }
  hung.processes.push_back({0, 0, 100, 1, true});
  hung.processes.push_back({1, 1, 101, 1, true});
  ASSERT_TRUE(host.Report(session->session, hung).ok());
  // The agent keeps reporting its ranks alive (a hang, not a lost node).
  clock.Advance(kHang);
  hung.heartbeats.clear();
  ASSERT_TRUE(host.Report(session->session, hung).ok());
  host.Sweep();

  hello.node = "node-a";
  hello.job = "small";
  session = host.Hello(hello, std::make_shared<testing::NullChannel>());
  ASSERT_TRUE(session.ok());
  NodeReportInfo report;
  report.generation = 1;
  for (int step = 1; step <= 4; ++step) {
    // With its training signals: loss, gradient norm, device and host memory.
    for (uint32_t rank : {0u, 1u}) {
      Heartbeat hb = StepHeartbeat("small", rank, 2, step, 0.1 * (rank + 1) * step);
      hb.loss = 2.5 - 0.25 * step + rank;
      hb.grad_norm = 1.0 + rank;
      hb.device_memory_bytes = (uint64_t{1} << 30) * (rank + 1);
      hb.host_rss_bytes = (uint64_t{1} << 29) * (rank + 1);
      report.heartbeats.push_back(hb);
    }
  }
  report.heartbeats.push_back(StepHeartbeat("small", 7, 2, 1, 0.1));  // rank out of range
  report.rejected = {{RejectReason::kUnknownField, 3}};
  report.processes.push_back({0, 0, 100, 1, true});
  report.processes.push_back({1, 1, 101, 1, true});
  clock.Advance(absl::Milliseconds(1500));
  ASSERT_TRUE(host.Report(session->session, report).ok());

  // A job above the per-rank cap exports aggregates only.
  hello.node = "node-b";
  hello.job = "large";
  session = host.Hello(hello, std::make_shared<testing::NullChannel>());
  ASSERT_TRUE(session.ok());
  NodeReportInfo large;
  large.generation = 1;
  large.heartbeats.push_back(StepHeartbeat("large", 0, 1000, 5, 1.0));
  ASSERT_TRUE(host.Report(session->session, large).ok());

  MetricsOptions options;
  options.max_ranks_per_job = 256;
  SupervisorCollector collector(&host, options);
  const std::string text = prometheus::TextSerializer().Serialize(collector.Collect());

  const std::string golden = std::string(TRAINSUP_TESTDATA_DIR) + "/metrics.golden";
  if (std::getenv("TRAINSUP_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(golden) << text;
  }
  EXPECT_EQ(text, ReadFile(golden)) << "regenerate with TRAINSUP_UPDATE_GOLDEN=1 if intended";
}

}  // namespace
}  // namespace trainsup
