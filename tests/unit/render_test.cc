#include "cli/render.h"

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "cli/diagnose_render.h"
#include "cli/table.h"
#include "daemon/core/event_log.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "trainsup/v1/operator.pb.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  // Every line ends with '\n': drop the empty piece after the last one.
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// The first whitespace-separated cell of each line after the header.
std::vector<std::string> FirstColumn(const std::string& table) {
  std::vector<std::string> out;
  std::vector<std::string> lines = Lines(table);
  for (size_t i = 1; i < lines.size(); ++i) {
    out.push_back(std::string(lines[i].substr(0, lines[i].find(' '))));
  }
  return out;
}

// The cell of `row` in the column headed `header` (columns start where their
// header starts).
std::string CellUnder(const std::string& header_line, const std::string& row,
                      const std::string& header) {
  size_t start = header_line.find(" " + header + " ");
  if (start == std::string::npos) {
    ADD_FAILURE() << "no column " << header << " in: " << header_line;
    return "";
  }
  ++start;
  if (start >= row.size()) return "";
  size_t end = row.find(' ', start);
  return row.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

v1::Rank MakeRank(uint32_t rank, double p99) {
  v1::Rank r;
  r.set_rank(rank);
  r.set_node("node-" + std::to_string(rank / 2));
  r.set_step(10);
  r.set_step_p50_seconds(p99 / 2);
  r.set_step_p99_seconds(p99);
  return r;
}

// --- Event kinds ---

TEST(EventKindNamesTest, AreTheCoresKindsInItsOrder) {
  std::vector<std::string> core;
  for (int k = 0; k < kEventKindCount; ++k) {
    core.emplace_back(EventKindName(static_cast<EventKind>(k)));
  }
  EXPECT_EQ(EventKindNames(), core);
}

// --- Table ---

TEST(TableTest, AlignsColumnsWithTwoSpaces) {
  Table table({"A", "LONGER", "C"});
  table.AddRow({"xxxx", "y", "zz"});
  table.AddRow({"1", "22", "3"});

  EXPECT_EQ(table.Render(),
            "A     LONGER  C\n"
            "xxxx  y       zz\n"
            "1     22      3\n");
}

TEST(TableTest, NoTrailingSpaces) {
  Table table({"NAME", "VALUE"});
  table.AddRow({"a-long-name", ""});
  table.AddRow({"b", "x"});

  std::string out = table.Render();

  EXPECT_EQ(out,
            "NAME         VALUE\n"
            "a-long-name\n"
            "b            x\n");
  for (const std::string& line : Lines(out)) {
    ASSERT_FALSE(line.empty());
    EXPECT_NE(line.back(), ' ') << "'" << line << "'";
  }
}

TEST(TableTest, HeadersOnly) {
  Table table({"JOB", "GEN"});
  EXPECT_EQ(table.Render(), "JOB  GEN\n");
}

TEST(TableTest, ShortRowsArePaddedAsEmptyCells) {
  Table table({"A", "B", "C"});
  table.AddRow({"1"});
  table.AddRow({"1", "2", "3"});

  EXPECT_EQ(table.Render(),
            "A  B  C\n"
            "1\n"
            "1  2  3\n");
}

// --- RenderJson ---

TEST(RenderJsonTest, PrintsProtoFieldNamesAndZeroValues) {
  v1::Rank rank;
  rank.set_rank(0);
  rank.set_step(-1);

  std::string json = RenderJson(rank);

  EXPECT_THAT(json, HasSubstr("\"rank\": 0"));
  EXPECT_THAT(json, HasSubstr("\"step\": -1"));  // a 64-bit number is a JSON number too
  EXPECT_THAT(json, HasSubstr("\"local_rank\": 0"));
  EXPECT_THAT(json, HasSubstr("\"step_p99_seconds\": 0"));
  EXPECT_THAT(json, HasSubstr("\"node\": \"\""));
  EXPECT_THAT(json, HasSubstr("\"heartbeats_received\": 0"));
  EXPECT_THAT(json, Not(HasSubstr("\"alive\"")));  // liveness says it
  EXPECT_THAT(json, Not(HasSubstr("\"loss\"")));   // an unset optional is left out
  EXPECT_THAT(json, Not(HasSubstr("localRank")));
  EXPECT_THAT(json, Not(HasSubstr("stepP99Seconds")));
}

TEST(RenderJsonTest, PrintsSetOptionalFields) {
  v1::Rank rank;
  rank.set_loss(2.5);

  std::string json = RenderJson(rank);

  EXPECT_THAT(json, HasSubstr("\"loss\": 2.5"));
}

TEST(RenderJsonTest, EscapesOnlyWhatJsonMust) {
  v1::Event event;
  event.set_id(18446744073709551615u);
  event.set_message("p99 > 2 x median & <tab>\t\"quoted\" \\ \x01");
  (*event.mutable_figures())["plan_id"] = 3;
  event.mutable_time()->set_seconds(1800000000);

  const std::string line = RenderJsonLine(event);

  EXPECT_EQ(line,
            "{\"id\":18446744073709551615,\"time\":\"2027-01-15T08:00:00Z\",\"kind\":\"\","
            "\"job_id\":\"\",\"generation\":0,\"node\":\"\",\"message\":\"p99 > 2 x median & "
            "<tab>\\t\\\"quoted\\\" \\\\ \\u0001\",\"figures\":{\"plan_id\":3}}\n");
}

TEST(RenderJsonTest, ParsesBackToTheSameMessage) {
  v1::ListRanksResponse response;
  response.set_job_id("job-1");
  response.set_world_size(4);
  *response.add_ranks() = MakeRank(0, 0.25);
  *response.add_ranks() = MakeRank(3, 1.5);
  response.mutable_ranks(1)->set_loss(0.125);

  std::string json = RenderJson(response);
  v1::ListRanksResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok()) << json;

  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, response)) << json;
}

// --- FormatSeconds ---

TEST(FormatSecondsTest, NegativeIsUnknown) {
  EXPECT_EQ(FormatSeconds(-1), "-");
  EXPECT_EQ(FormatSeconds(-0.001), "-");
}

TEST(FormatSecondsTest, BelowOneSecondInMilliseconds) {
  EXPECT_EQ(FormatSeconds(0), "0ms");
  EXPECT_EQ(FormatSeconds(0.045), "45ms");
  EXPECT_EQ(FormatSeconds(0.5), "500ms");
}

TEST(FormatSecondsTest, SecondsWithTwoDecimalsBelowAMinute) {
  EXPECT_EQ(FormatSeconds(1), "1.00s");
  EXPECT_EQ(FormatSeconds(1.5), "1.50s");
  EXPECT_EQ(FormatSeconds(12.345), "12.35s");
}

TEST(FormatSecondsTest, MinutesAndHoursFromAMinute) {
  EXPECT_EQ(FormatSeconds(60), "1m");
  EXPECT_EQ(FormatSeconds(1633), "27m13s");
  EXPECT_EQ(FormatSeconds(86411), "24h11s");
}

// The unit is chosen after rounding: values just below a unit boundary that
// round up to it are shown in the next unit.
TEST(FormatSecondsTest, RoundingDoesNotCrossUnitBoundaries) {
  EXPECT_EQ(FormatSeconds(0.9996), "1.00s");
  EXPECT_EQ(FormatSeconds(59.996), "1m");
}

// --- Tables ---

TEST(RenderRanksTableTest, AFinishedRankIsNotFlaggedDead) {
  v1::ListRanksResponse response;
  v1::Rank done = MakeRank(0, 0.1);
  done.set_liveness("finished");
  done.set_exit("exit code 0");
  v1::Rank dead = MakeRank(1, 0.1);
  dead.set_liveness("dead");
  dead.set_exit("exit code 1");
  *response.add_ranks() = done;
  *response.add_ranks() = dead;

  std::vector<std::string> lines = Lines(RenderRanksTable(response));

  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(CellUnder(lines[0], lines[1], "LIVENESS"), "finished");
  EXPECT_THAT(lines[1], Not(HasSubstr("exit code")));
  EXPECT_EQ(CellUnder(lines[0], lines[2], "LIVENESS"), "dead");
  EXPECT_THAT(lines[2], HasSubstr("exit code 1"));
}

TEST(RenderJobDetailTest, CountsTakeTheirPluralOnlyWhenNotOne) {
  v1::JobDetail d;
  d.mutable_job()->set_restarts(1);
  d.mutable_job_mtbf()->set_failures(1);
  d.mutable_job_mtbf()->set_exposure_seconds(86411);
  const std::string text = RenderJobDetail(d);
  EXPECT_THAT(text, HasSubstr("(1 restart)"));
  EXPECT_THAT(text, HasSubstr("from 1 failure over 24h11s running"));
  EXPECT_THAT(text, Not(HasSubstr("restarts")));
}

TEST(RenderJobDetailTest, SignalsAreOneLineByNameAndAbsentWhenNone) {
  v1::JobDetail d;
  EXPECT_THAT(RenderJobDetail(d), Not(HasSubstr("signals")));
  (*d.mutable_job()->mutable_signals())["step_time_ratio"] = 1.0234;
  (*d.mutable_job()->mutable_signals())["loss_flat"] = 0;
  (*d.mutable_job()->mutable_signals())["loss_shifted"] = 1;
  EXPECT_THAT(RenderJobDetail(d),
              HasSubstr("signals       loss_flat 0, loss_shifted 1, step_time_ratio 1.023\n"));
}

TEST(RenderRanksTableTest, ShowsLiveness) {
  v1::ListRanksResponse response;
  v1::Rank rank = MakeRank(0, 0.1);
  rank.set_liveness("unknown");
  *response.add_ranks() = rank;
  EXPECT_THAT(RenderRanksTable(response), HasSubstr("unknown"));
}

TEST(RenderStacksTest, GroupsSmallestFirstWithTheCulpritMarked) {
  v1::StacksResponse s;
  s.set_job_id("llama");
  s.set_generation(2);
  s.set_event_id(17);
  s.set_collect_seconds(0.31);
  v1::StackGroup* hung = s.add_groups();
  hung->add_ranks(2);
  hung->add_nodes("node-b");
  hung->set_stack("Thread 0x1 (most recent call first):\n  File \"train.py\", line 9 in hang\n");
  hung->set_culprit(true);
  v1::StackGroup* waiting = s.add_groups();
  for (uint32_t r : {0u, 1u, 3u}) {
    waiting->add_ranks(r);
    waiting->add_nodes(r < 2 ? "node-a" : "node-b");
  }
  waiting->set_stack("  File \"distributed_c10d.py\", line 1 in all_reduce\n");
  s.add_unanswered_ranks(5);

  const std::string text = RenderStacks(s);

  EXPECT_THAT(text, HasSubstr("job llama generation 2: Python stacks of 5 ranks in 2 groups"));
  EXPECT_THAT(text, HasSubstr("== 1 rank: 2 (node-b)   <- holds the culprit the stall named"));
  EXPECT_THAT(text, HasSubstr("== 3 ranks: 0 (node-a), 1 (node-a), 3 (node-b)"));
  EXPECT_LT(text.find("line 9 in hang"), text.find("in all_reduce"));
  EXPECT_THAT(text, HasSubstr("no stack from rank 5"));
  EXPECT_THAT(text, Not(HasSubstr("NCCL")));  // no dump: nothing said of one

  s.mutable_collective()->set_dumps(4);
  s.mutable_collective()->set_text(
      "rank 2 never entered all_reduce #7 of pg 0 (default_pg) that ranks 0-1, 3 wait in");
  EXPECT_THAT(RenderStacks(s), HasSubstr("\nNCCL flight recorder (4 dumps): rank 2 never entered "
                                         "all_reduce #7 of pg 0 (default_pg) that ranks 0-1, 3 "
                                         "wait in\n"));
}

TEST(RenderRanksTableTest, KeepsTheOrderTheSupervisorSorted) {
  v1::ListRanksResponse response;
  *response.add_ranks() = MakeRank(3, 2.0);
  *response.add_ranks() = MakeRank(0, 0.1);
  *response.add_ranks() = MakeRank(2, 0.3);

  std::string table = RenderRanksTable(response);

  EXPECT_THAT(FirstColumn(table), ElementsAre("3", "0", "2"));
  EXPECT_THAT(Lines(table)[0], HasSubstr("STEP_P99"));
  EXPECT_THAT(Lines(table)[1], HasSubstr("2.00s"));
}

TEST(RenderRanksSummaryTest, SaysWhatTheTableLeavesOut) {
  v1::ListRanksResponse response;
  response.set_job_id("llama");
  response.set_world_size(100000);
  v1::RankSummary* s = response.mutable_summary();
  s->set_ranks(100000);
  s->set_alive(99999);
  s->set_dead(1);
  s->set_stragglers(2);
  s->set_min_step(40);
  s->set_max_step(45);
  s->set_compute_p99_median_seconds(0.5);
  s->set_compute_p99_max_seconds(3.0);
  s->set_oldest_heartbeat_age_seconds(1.5);

  EXPECT_EQ(RenderRanksSummary(response, "showing the top 20"),
            "job llama: 100000 of 100000 ranks heard (alive 99999, dead 1, unknown 0, finished 0), "
            "stragglers 2, steps 40..45, compute p99 median 500ms max 3.00s, oldest heartbeat "
            "1.50s ago; showing the top 20\n");
}

TEST(RenderRanksTableTest, ShowsUnknownStepAndLossAsDash) {
  v1::ListRanksResponse response;
  v1::Rank rank = MakeRank(0, 0.1);
  rank.set_step(-1);
  *response.add_ranks() = rank;

  std::vector<std::string> lines = Lines(RenderRanksTable(response));

  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(CellUnder(lines[0], lines[1], "STEP"), "-");
  EXPECT_EQ(CellUnder(lines[0], lines[1], "LOSS"), "-");
}

TEST(RenderRanksTableTest, ARankWithNoStepTimesShowsDashNotZero) {
  v1::ListRanksResponse response;
  v1::Rank fresh = MakeRank(0, 0);  // no step in this generation yet
  fresh.set_step(-1);
  *response.add_ranks() = fresh;
  *response.add_ranks() = MakeRank(1, 0.2);

  std::vector<std::string> lines = Lines(RenderRanksTable(response));

  ASSERT_EQ(lines.size(), 3u);
  for (const char* column : {"COMPUTE_P99", "STEP_P50", "STEP_P99"}) {
    EXPECT_EQ(CellUnder(lines[0], lines[1], column), "-") << column;
  }
  EXPECT_EQ(CellUnder(lines[0], lines[2], "STEP_P50"), "100ms");
  EXPECT_EQ(CellUnder(lines[0], lines[2], "STEP_P99"), "200ms");

  v1::ListJobsResponse jobs;
  jobs.add_jobs()->set_job_id("new");
  lines = Lines(RenderJobsTable(jobs, absl::UnixEpoch()));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(CellUnder(lines[0], lines[1], "STEP_P50"), "-");
  EXPECT_EQ(CellUnder(lines[0], lines[1], "STEP_P99"), "-");
}

TEST(RenderJobsTableTest, AJobWaitingForResumeWithNoAgentSaysSo) {
  v1::ListJobsResponse response;
  for (const auto& [id, state, waiting] :
       std::vector<std::tuple<std::string, std::string, int>>{{"held-left", "held", 0},
                                                              {"held-waits", "held", 2},
                                                              {"killed-left", "killed", 0},
                                                              {"done", "finished", 0}}) {
    v1::Job* job = response.add_jobs();
    job->set_job_id(id);
    job->set_state(state);
    job->set_agents_waiting(waiting);
  }
  const std::vector<std::string> lines = Lines(RenderJobsTable(response, absl::UnixEpoch()));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(CellUnder(lines[0], lines[1], "STATE"), "held,NO_AGENT");
  EXPECT_EQ(CellUnder(lines[0], lines[2], "STATE"), "held");
  EXPECT_EQ(CellUnder(lines[0], lines[3], "STATE"), "killed,NO_AGENT");
  EXPECT_EQ(CellUnder(lines[0], lines[4], "STATE"), "finished");
}

TEST(RenderDiagnosisTest, AFinishedJobsGoodputIsFinalNotSoFar) {
  v1::DiagnoseResponse d;
  d.set_job_id("j");
  d.set_verdict("healthy");
  d.set_state("running");
  d.mutable_ledger()->set_goodput_fraction(0.9);
  d.mutable_ledger()->set_useful_seconds(90);
  d.mutable_ledger()->set_wall_seconds(100);
  EXPECT_THAT(Lines(RenderDiagnosis(d))[2],
              "state running; goodput 90.0% so far (useful 1m30s of 1m40s)");
  d.set_state("finished");
  EXPECT_THAT(Lines(RenderDiagnosis(d))[2], "state finished; goodput 90.0% (useful 1m30s of 1m40s)");
}

TEST(RenderJobsTableTest, ShowsLastProgressAsAnAge) {
  const absl::Time now = absl::FromUnixSeconds(1000) + absl::Milliseconds(500);
  v1::ListJobsResponse response;
  v1::Job* job = response.add_jobs();
  job->set_job_id("job-1");
  job->set_step(42);
  job->mutable_last_progress_time()->set_seconds(990);
  v1::Job* idle = response.add_jobs();
  idle->set_job_id("job-2");
  idle->set_step(-1);

  std::vector<std::string> lines = Lines(RenderJobsTable(response, now));

  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[1], HasSubstr("10.50s ago"));
  EXPECT_THAT(lines[2], Not(HasSubstr("ago")));
}

}  // namespace
}  // namespace trainsup
