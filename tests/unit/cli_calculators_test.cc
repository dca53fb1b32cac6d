// trainsupctl plan / budget: flags -> core -> table and JSON (cli/render.h).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "cli/render.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// Parses the command's JSON (it must be one valid object).
Struct ParseJson(const std::string& json) {
  Struct out;
  auto status = google::protobuf::util::JsonStringToMessage(json, &out);
  EXPECT_TRUE(status.ok()) << status << "\n" << json;
  return out;
}

// Parses the command's JSON as the result message M; keys M does not have
// fail the test.
template <typename M>
M ParseAs(const std::string& json) {
  M out;
  google::protobuf::util::JsonParseOptions strict;
  strict.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(json, &out, strict);
  EXPECT_TRUE(status.ok()) << status << "\n" << json;
  return out;
}

const Value& Field(const Struct& s, const std::string& key) {
  static const Value* const kMissing = new Value();
  auto it = s.fields().find(key);
  if (it == s.fields().end()) {
    ADD_FAILURE() << "no key " << key;
    return *kMissing;
  }
  return it->second;
}
double Number(const Struct& s, const std::string& key) { return Field(s, key).number_value(); }
// A figure that does not apply is an unset optional field: not printed.
bool IsAbsent(const Struct& s, const std::string& key) { return s.fields().count(key) == 0; }

std::string PlanText(const PlanFlags& flags, bool json) {
  absl::StatusOr<std::string> out = RunPlanCommand(flags, json);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "";
}
std::string BudgetText(const ComputeBudgetInputs& flags, bool json) {
  absl::StatusOr<std::string> out = RunBudgetCommand(flags, json);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "";
}

TEST(PlanCommandTest, DefaultsTable) {
  const std::string out = PlanText(PlanFlags{}, false);
  EXPECT_THAT(out, HasSubstr("mtbf            6h\n"));
  EXPECT_THAT(out, HasSubstr("restart         12m\n"));
  EXPECT_THAT(out, HasSubstr("young interval  46m29s"));
  EXPECT_THAT(out, HasSubstr("daly interval   44m30s"));
  EXPECT_THAT(out, HasSubstr("write tax 6.5% + rework 9.8% = overhead 16.2% (goodput 83.8%)"));
  EXPECT_THAT(out, HasSubstr("\nverdict: checkpoint every 46m29s"));
  EXPECT_THAT(out, Not(HasSubstr("warning:")));
  EXPECT_THAT(out, Not(HasSubstr("async write")));

  // The sensitivity table: a header and five rows, 0.25x .. 4x.
  std::vector<std::string> lines = Lines(out);
  auto header = std::find_if(lines.begin(), lines.end(),
                             [](const std::string& l) { return l.rfind("INTERVAL", 0) == 0; });
  ASSERT_NE(header, lines.end());
  EXPECT_THAT(*header, StartsWith("INTERVAL  FACTOR  WRITE_TAX  REWORK  TOTAL_WASTE  GOODPUT"));
  std::vector<std::string> rows(header + 1, header + 6);
  EXPECT_THAT(rows, ElementsAre(StartsWith("11m37s    0.25x   25.8%"), StartsWith("23m14s    0.5x"),
                                StartsWith("46m29s    1x      6.5%       9.8%    16.2%"),
                                StartsWith("1h32m57s  2x"), StartsWith("3h5m54s   4x")));
}

TEST(PlanCommandTest, DefaultsJson) {
  const std::string out = PlanText(PlanFlags{}, true);
  Struct json = ParseJson(out);
  EXPECT_EQ(Number(json, "mtbf_seconds"), 21600);
  EXPECT_EQ(Number(json, "checkpoint_write_seconds"), 180);
  EXPECT_EQ(Number(json, "writers"), 1);
  EXPECT_TRUE(IsAbsent(json, "async_snapshot_seconds"));
  EXPECT_EQ(Number(json, "restart_seconds"), 720);
  EXPECT_TRUE(IsAbsent(json, "run_seconds"));
  EXPECT_EQ(Number(json, "blocking_checkpoint_seconds"), 180);
  EXPECT_EQ(Number(json, "async_write_seconds"), 0);
  EXPECT_NEAR(Number(json, "young_interval_seconds"), 2788.548, 1e-3);
  EXPECT_NEAR(Number(json, "daly_interval_seconds"), 2669.84, 1e-2);
  const Struct& at_young = Field(json, "at_young_interval").struct_value();
  EXPECT_NEAR(Number(at_young, "interval_seconds"), 2788.548, 1e-3);
  EXPECT_NEAR(Number(at_young, "write_tax_fraction"), 0.06455, 1e-5);
  EXPECT_NEAR(Number(at_young, "rework_fraction"), 0.09788, 1e-5);
  EXPECT_NEAR(Number(at_young, "total_waste_fraction"), 0.16243, 1e-5);
  EXPECT_NEAR(Number(at_young, "goodput_fraction"), 0.83757, 1e-5);
  EXPECT_NEAR(Number(json, "planned_interval_seconds"), 2788.548, 1e-3);
  EXPECT_NEAR(Number(json, "recommended_interval_seconds"), 2788.548, 1e-3);
  const auto& rows = Field(json, "sensitivity").list_value().values();
  ASSERT_EQ(rows.size(), 5);
  const double factors[] = {0.25, 0.5, 1, 2, 4};
  for (int i = 0; i < 5; ++i) {
    const Struct& row = rows[i].struct_value();
    EXPECT_EQ(Number(row, "factor"), factors[i]);
    EXPECT_NEAR(Number(row, "interval_seconds"), factors[i] * 2788.548, 1e-2);
    EXPECT_FALSE(Field(row, "write_overlaps_next").bool_value());
    for (const char* key : {"write_tax_fraction", "rework_fraction", "total_waste_fraction",
                            "goodput_fraction"}) {
      EXPECT_EQ(row.fields().count(key), 1u) << key;
    }
  }
  EXPECT_EQ(Field(json, "verdict").string_value(), "checkpoint-every");
  EXPECT_THAT(Field(json, "verdict_text").string_value(), HasSubstr("checkpoint every 46m29s"));
  EXPECT_EQ(Field(json, "warnings").list_value().values_size(), 0);
  EXPECT_EQ(json.fields_size(), 16);  // 18 less the two optional inputs not given
}

TEST(PlanCommandTest, JsonIsTheResultMessageEndingWithANewline) {
  const std::string out = PlanText(PlanFlags{}, true);
  EXPECT_THAT(out, EndsWith("}\n"));
  const auto result = ParseAs<v1::CheckpointPlanResult>(out);
  EXPECT_EQ(result.verdict(), "checkpoint-every");
  EXPECT_FALSE(result.has_run_seconds());
  EXPECT_TRUE(result.has_recommended_interval_seconds());
}

TEST(PlanCommandTest, EightWritersAboutEightPercent) {
  PlanFlags flags;
  flags.writers = 8;
  Struct json = ParseJson(PlanText(flags, true));
  EXPECT_EQ(Number(json, "blocking_checkpoint_seconds"), 22.5);
  EXPECT_NEAR(Field(json, "at_young_interval").struct_value().fields().at(
                  "total_waste_fraction").number_value(),
              0.079, 1e-3);
  EXPECT_THAT(PlanText(flags, false),
              HasSubstr("blocks 22.5s (synchronous write: 180s / 8 writers)"));
}

TEST(PlanCommandTest, AsyncSnapshotOfTwoSecondsUnderFivePercent) {
  PlanFlags flags;
  flags.async_snapshot_seconds = 2;
  Struct json = ParseJson(PlanText(flags, true));
  EXPECT_EQ(Number(json, "async_snapshot_seconds"), 2);
  EXPECT_EQ(Number(json, "blocking_checkpoint_seconds"), 2);
  EXPECT_EQ(Number(json, "async_write_seconds"), 180);
  EXPECT_LT(Field(json, "at_planned_interval").struct_value().fields().at(
                "total_waste_fraction").number_value(),
            0.05);
  const std::string table = PlanText(flags, false);
  EXPECT_THAT(table, HasSubstr("blocks 2s (asynchronous snapshot)"));
  EXPECT_THAT(table, HasSubstr("async write     180s in the background"));
  EXPECT_THAT(table, HasSubstr("write still running at the next"));  // 0.25x, 0.5x rows
  EXPECT_THAT(table, HasSubstr("overhead 4.7%"));
}

TEST(PlanCommandTest, AsyncWriteLongerThanTheIntervalWarns) {
  PlanFlags flags;
  flags.async_snapshot_seconds = 2;
  flags.checkpoint_seconds = 600;
  flags.mtbf_hours = 1;
  flags.restart_seconds = 60;
  const std::string table = PlanText(flags, false);
  EXPECT_THAT(table, HasSubstr("warning: a write would still be running when the next is due"));
  EXPECT_THAT(table, HasSubstr("planned         10m, raised to the asynchronous write"));
  EXPECT_THAT(table, HasSubstr("verdict: checkpoint every 10m"));
  Struct json = ParseJson(PlanText(flags, true));
  EXPECT_EQ(Number(json, "planned_interval_seconds"), 600);
  EXPECT_EQ(Field(json, "warnings").list_value().values_size(), 1);
}

TEST(PlanCommandTest, ShortRunCheckpointsOnceAtTheEnd) {
  PlanFlags flags;
  flags.run_hours = 0.5;
  EXPECT_THAT(PlanText(flags, false),
              HasSubstr("verdict: checkpoint once at the end: the best interval (46m29s) is not "
                        "shorter than the run (30m)"));
  Struct json = ParseJson(PlanText(flags, true));
  EXPECT_EQ(Field(json, "verdict").string_value(), "checkpoint-at-end");
  EXPECT_EQ(Number(json, "run_seconds"), 1800);
  EXPECT_TRUE(IsAbsent(json, "recommended_interval_seconds"));
}

TEST(PlanCommandTest, NoPositiveGoodputGivesNoNumber) {
  PlanFlags flags;
  flags.mtbf_hours = 0.2;  // 12 min, as long as a restart
  const std::string table = PlanText(flags, false);
  EXPECT_THAT(table,
              HasSubstr("verdict: no interval gives positive goodput on this infrastructure"));
  Struct json = ParseJson(PlanText(flags, true));
  EXPECT_EQ(Field(json, "verdict").string_value(), "no-positive-goodput");
  EXPECT_TRUE(IsAbsent(json, "recommended_interval_seconds"));
}

TEST(PlanCommandTest, BadFlagsNameTheFlag) {
  struct Case {
    PlanFlags flags;
    std::string flag;
  };
  std::vector<Case> cases(7);
  cases[0].flags.mtbf_hours = 0, cases[0].flag = "--mtbf-hours";
  cases[1].flags.mtbf_hours = -1, cases[1].flag = "--mtbf-hours";
  cases[2].flags.checkpoint_seconds = 0, cases[2].flag = "--checkpoint-seconds";
  cases[3].flags.restart_seconds = -1, cases[3].flag = "--restart-seconds";
  cases[4].flags.writers = 0, cases[4].flag = "--writers";
  cases[5].flags.async_snapshot_seconds = 0, cases[5].flag = "--async-snapshot-seconds";
  cases[6].flags.run_hours = -2, cases[6].flag = "--run-hours";
  for (const Case& c : cases) {
    absl::StatusOr<std::string> out = RunPlanCommand(c.flags, false);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << c.flag;
    EXPECT_THAT(std::string(out.status().message()), StartsWith(c.flag));
  }
  PlanFlags zero_restart;
  zero_restart.restart_seconds = 0;  // a restart can be free
  EXPECT_TRUE(RunPlanCommand(zero_restart, false).ok());
}

TEST(BudgetCommandTest, DefaultsTable) {
  const std::string out = BudgetText(ComputeBudgetInputs{}, false);
  EXPECT_THAT(out, HasSubstr("compute         6912 samples/s (144.7us per sample)\n"));
  EXPECT_THAT(out, HasSubstr("per sample      200.0us (the loader sets the pace)\n"));
  EXPECT_THAT(out, HasSubstr("utilization     72.3% (GPUs wait for data 27.7% of the time)\n"));
  EXPECT_THAT(out, HasSubstr("throughput      5000 samples/s\n"));
  EXPECT_THAT(out, Not(HasSubstr("cost")));
  std::vector<std::string> lines = Lines(out);
  ASSERT_GE(lines.size(), 8u);
  std::vector<std::string> sweep(lines.end() - 8, lines.end());
  EXPECT_THAT(sweep,
              ElementsAre("LOADER    SAMPLES_PER_S  PER_SAMPLE  UTILIZATION  THROUGHPUT",
                          StartsWith("0.5x      2500"), StartsWith("0.75x     3750"),
                          "1x        5000           200.0us     72.3%        5000",
                          StartsWith("1.25x     6250"),
                          "=compute  6912           144.7us     100.0%       6912",
                          StartsWith("1.5x      7500"), StartsWith("2x        10000")));
}

TEST(BudgetCommandTest, DefaultsJson) {
  Struct json = ParseJson(BudgetText(ComputeBudgetInputs{}, true));
  EXPECT_EQ(Number(json, "compute_samples_per_second"), 6912);
  EXPECT_EQ(Number(json, "loader_samples_per_second"), 5000);
  EXPECT_TRUE(Field(json, "overlap").bool_value());
  EXPECT_NEAR(Number(json, "utilization_fraction"), 0.72338, 1e-5);
  EXPECT_NEAR(Number(json, "idle_fraction"), 0.27662, 1e-5);
  EXPECT_NEAR(Number(json, "seconds_per_sample"), 2e-4, 1e-12);
  EXPECT_NEAR(Number(json, "compute_seconds_per_sample"), 1 / 6912.0, 1e-12);
  EXPECT_NEAR(Number(json, "throughput_samples_per_second"), 5000, 1e-6);
  EXPECT_TRUE(Field(json, "loader_bound").bool_value());
  for (const char* key :
       {"gpus", "price_per_gpu_hour", "useful_gpu_hours", "wall_gpu_hours", "wall_hours", "cost",
        "idle_cost"}) {
    EXPECT_TRUE(IsAbsent(json, key)) << key;
  }
  const auto& sweep = Field(json, "sweep").list_value().values();
  ASSERT_EQ(sweep.size(), 7);
  EXPECT_EQ(Field(sweep[4].struct_value(), "label").string_value(), "= compute");
  EXPECT_EQ(Number(sweep[4].struct_value(), "utilization_fraction"), 1);
  EXPECT_NEAR(Number(sweep[0].struct_value(), "utilization_fraction"), 2500 / 6912.0, 1e-9);
  for (const char* key : {"wall_gpu_hours", "cost"}) {
    EXPECT_TRUE(IsAbsent(sweep[0].struct_value(), key)) << key;
  }
  EXPECT_EQ(json.fields_size(), 11);  // 18 less the seven that need optional inputs
}

TEST(BudgetCommandTest, JsonIsTheResultMessageEndingWithANewline) {
  const std::string out = BudgetText(ComputeBudgetInputs{}, true);
  EXPECT_THAT(out, EndsWith("}\n"));
  const auto result = ParseAs<v1::ComputeBudgetResult>(out);
  EXPECT_EQ(result.sweep_size(), 7);
  EXPECT_FALSE(result.has_gpus());
}

TEST(BudgetCommandTest, WallTimeAndCost) {
  ComputeBudgetInputs flags;
  flags.gpus = 8;
  flags.price_per_gpu_hour = 2;
  flags.useful_gpu_hours = 1000;
  const std::string table = BudgetText(flags, false);
  EXPECT_THAT(table, HasSubstr("wall time       1382.4 GPU-hours = 172.8 h on 8 GPUs\n"));
  EXPECT_THAT(table, HasSubstr("cost            2764.80 at 2.00 per GPU-hour, of which idle GPUs "
                               "764.80\n"));
  EXPECT_THAT(table, HasSubstr("WALL_GPU_HOURS  COST"));
  Struct json = ParseJson(BudgetText(flags, true));
  EXPECT_EQ(Number(json, "gpus"), 8);
  EXPECT_NEAR(Number(json, "wall_gpu_hours"), 1382.4, 1e-9);
  EXPECT_NEAR(Number(json, "wall_hours"), 172.8, 1e-9);
  EXPECT_NEAR(Number(json, "cost"), 2764.8, 1e-9);
  EXPECT_NEAR(Number(json, "idle_cost"), 764.8, 1e-9);
  EXPECT_NEAR(Number(json, "price_per_gpu_hour"), 2, 1e-9);
  EXPECT_NEAR(Number(json, "useful_gpu_hours"), 1000, 1e-9);
  const Struct& first = Field(json, "sweep").list_value().values(0).struct_value();
  EXPECT_NEAR(Number(first, "wall_gpu_hours"), 2764.8, 1e-9);
  EXPECT_NEAR(Number(first, "cost"), 5529.6, 1e-9);
}

TEST(BudgetCommandTest, NoOverlap) {
  ComputeBudgetInputs flags;
  flags.overlap = false;
  const std::string table = BudgetText(flags, false);
  EXPECT_THAT(table, HasSubstr("not overlapped: loading adds to each step"));
  EXPECT_THAT(table, HasSubstr("utilization     42.0%"));
}

TEST(BudgetCommandTest, BadFlagsNameTheFlag) {
  auto message = [](const ComputeBudgetInputs& flags) {
    absl::StatusOr<std::string> out = RunBudgetCommand(flags, false);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(out.status().message());
  };
  ComputeBudgetInputs flags;
  flags.compute_samples_per_second = 0;
  EXPECT_THAT(message(flags), StartsWith("--compute-samples-per-second"));
  flags = {};
  flags.loader_samples_per_second = -3;
  EXPECT_THAT(message(flags), StartsWith("--loader-samples-per-second"));
  flags = {};
  flags.useful_gpu_hours = 10;
  flags.gpus = 0;
  EXPECT_THAT(message(flags), StartsWith("--gpus"));
  flags.gpus = 1;
  flags.price_per_gpu_hour = -1;
  EXPECT_THAT(message(flags), StartsWith("--price-per-gpu-hour"));
  flags.price_per_gpu_hour = 1;
  flags.useful_gpu_hours = 0;
  EXPECT_THAT(message(flags), StartsWith("--useful-gpu-hours"));
  flags = {};
  flags.gpus = 8;  // without --useful-gpu-hours there is nothing to scale
  EXPECT_THAT(message(flags), HasSubstr("need --useful-gpu-hours"));
}

}  // namespace
}  // namespace trainsup
