// The verdict table: how rules are written, which rule a failure finds, and
// the order of the script's word, exit codes and exception types.
#include "daemon/core/verdicts.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;

RankState Rank() { return RankState(1, 1); }

// A rank that exited with `code` (its process, seen by its agent).
RankState ExitedWith(int32_t code) {
  RankState r = Rank();
  r.death = RankDeath{absl::UnixEpoch(), true, code, 0};
  return r;
}

TEST(VerdictRuleTest, ParsesExitCodesAndExceptionTypes) {
  absl::StatusOr<VerdictRule> exit = ParseVerdictRule("exit:16=restart-elsewhere");
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->exit_code, 16);
  EXPECT_EQ(exit->action, VerdictAction::kRestartElsewhere);
  EXPECT_EQ(exit->ToString(), "exit:16=restart-elsewhere");

  absl::StatusOr<VerdictRule> exception = ParseVerdictRule("  exception : llm.LossSpikeError = stop ");
  ASSERT_TRUE(exception.ok()) << exception.status();
  EXPECT_EQ(exception->exit_code, std::nullopt);
  EXPECT_EQ(exception->exception_type, "llm.LossSpikeError");
  EXPECT_EQ(exception->ToString(), "exception:llm.LossSpikeError=stop");

  EXPECT_EQ(ParseVerdictRule("exit:17=transient")->action, VerdictAction::kTransient);
  EXPECT_EQ(ParseVerdictRule("exit:1=default")->action, VerdictAction::kDefault);
}

TEST(VerdictRuleTest, RefusesWhatItCannotRead) {
  for (const char* bad :
       {"", "exit:16", "exit:16=retry", "exit:0=stop", "exit:256=stop", "exit:-1=stop",
        "exit:x=stop", "signal:9=stop", "exception:=stop", "exception:1Bad=stop",
        "exception:Bad Name=stop", "exception:a;b=stop"}) {
    absl::StatusOr<VerdictRule> rule = ParseVerdictRule(bad);
    EXPECT_FALSE(rule.ok()) << bad;
    EXPECT_THAT(std::string(rule.status().message()), HasSubstr("write exit:CODE=ACTION")) << bad;
  }
  EXPECT_FALSE(ParseVerdictRule("exception:" + std::string(300, 'E') + "=stop").ok());
}

TEST(VerdictRuleTest, AJobBringsAtMost64RulesThatAllParse) {
  EXPECT_TRUE(CheckJobVerdictRules({}).ok());
  EXPECT_TRUE(CheckJobVerdictRules({"exit:42=stop", "exception:Boom=transient"}).ok());
  EXPECT_FALSE(CheckJobVerdictRules({"exit:42=stop", "exit:43=nonsense"}).ok());
  EXPECT_FALSE(CheckJobVerdictRules(std::vector<std::string>(65, "exit:42=stop")).ok());
}

TEST(VerdictTableTest, DefaultsAreMegatronsExitCodesAndLlmFoundrysStops) {
  const VerdictTable table = VerdictTable::Defaults();
  ASSERT_NE(table.ForExitCode(16), nullptr);
  EXPECT_EQ(table.ForExitCode(16)->action, VerdictAction::kRestartElsewhere);
  EXPECT_EQ(table.ForExitCode(17)->action, VerdictAction::kTransient);
  EXPECT_EQ(table.ForException("LossSpikeError")->action, VerdictAction::kStop);
  EXPECT_EQ(table.ForException("HighLossError")->action, VerdictAction::kStop);
  EXPECT_EQ(table.ForExitCode(1), nullptr);
  EXPECT_EQ(table.ForException("ValueError"), nullptr);
}

TEST(VerdictTableTest, ATableFileReplacesRulesOfTheSameKeyAndNamesABadLine) {
  VerdictTable table = VerdictTable::Defaults();
  ASSERT_TRUE(table
                  .AddText("# site rules\n"
                           "exit:16=default   # our Megatron fork exits 16 for other reasons\n"
                           "\n"
                           "exception:NotEnoughDatasetSamplesError=stop\n")
                  .ok());
  EXPECT_EQ(table.ForExitCode(16)->action, VerdictAction::kDefault);
  EXPECT_EQ(table.ForException("NotEnoughDatasetSamplesError")->action, VerdictAction::kStop);
  EXPECT_EQ(table.rules().size(), 5u);

  const absl::Status bad = table.AddText("exit:20=stop\nexit:21=maybe\n");
  EXPECT_THAT(std::string(bad.message()), HasSubstr("line 2: verdict rule 'exit:21=maybe'"));
  EXPECT_EQ(table.ForExitCode(20), nullptr);  // nothing of a bad file is taken
}

TEST(VerdictOnTest, TheExitCodeFindsItsRule) {
  const std::optional<Verdict> v = VerdictOn(ExitedWith(16), nullptr, VerdictTable::Defaults());
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->action, VerdictAction::kRestartElsewhere);
  EXPECT_EQ(v->source, Verdict::Source::kExitCode);
  EXPECT_EQ(v->found_by, "trainsupd's rule exit:16=restart-elsewhere");
}

TEST(VerdictOnTest, TheCodeTheHelperSawAtSysExitCountsBeforeTheProcesssOwn) {
  RankState r = ExitedWith(1);  // e.g. a launcher that mapped it
  r.exiting = true;
  r.exiting_code = 17;
  EXPECT_EQ(VerdictOn(r, nullptr, VerdictTable::Defaults())->action, VerdictAction::kTransient);
}

TEST(VerdictOnTest, TheExceptionTypeFindsItsRuleWhenTheExitCodeHasNone) {
  RankState r = ExitedWith(1);
  r.exception_type = "LossSpikeError";
  r.exception_message = "loss spiked for 5 steps";
  const std::optional<Verdict> v = VerdictOn(r, nullptr, VerdictTable::Defaults());
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->action, VerdictAction::kStop);
  EXPECT_EQ(v->source, Verdict::Source::kException);
}

TEST(VerdictOnTest, AnExitCodeRuleComesBeforeAnExceptionRule) {
  RankState r = ExitedWith(16);
  r.exception_type = "LossSpikeError";  // caught before its sys.exit(16)
  EXPECT_EQ(VerdictOn(r, nullptr, VerdictTable::Defaults())->action,
            VerdictAction::kRestartElsewhere);
}

TEST(VerdictOnTest, TheScriptsOwnWordComesFirst) {
  RankState r = ExitedWith(16);
  r.verdict = VerdictAction::kStop;
  r.verdict_reason = "the data shard is corrupt";
  const std::optional<Verdict> v = VerdictOn(r, nullptr, VerdictTable::Defaults());
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->action, VerdictAction::kStop);
  EXPECT_EQ(v->source, Verdict::Source::kScript);
  EXPECT_EQ(v->found_by, "hb.verdict");
  EXPECT_EQ(v->reason, "the data shard is corrupt");
}

TEST(VerdictOnTest, AScriptsDefaultForgetsItsVerdictAndTheTableDecides) {
  RankState r = ExitedWith(17);
  r.verdict = VerdictAction::kDefault;
  EXPECT_EQ(VerdictOn(r, nullptr, VerdictTable::Defaults())->source, Verdict::Source::kExitCode);
}

TEST(VerdictOnTest, TheJobsRulesComeBeforeTrainsupds) {
  const VerdictTable job = *VerdictTable::FromRules({"exit:16=transient", "exit:3=stop"});
  std::optional<Verdict> v = VerdictOn(ExitedWith(16), &job, VerdictTable::Defaults());
  EXPECT_EQ(v->action, VerdictAction::kTransient);
  EXPECT_EQ(v->found_by, "the job's rule exit:16=transient");
  EXPECT_EQ(VerdictOn(ExitedWith(3), &job, VerdictTable::Defaults())->action, VerdictAction::kStop);
  // Keys the job does not name are trainsupd's.
  EXPECT_EQ(VerdictOn(ExitedWith(17), &job, VerdictTable::Defaults())->found_by,
            "trainsupd's rule exit:17=transient");
}

TEST(VerdictOnTest, NothingAppliesToAnOrdinaryFailureOrADefaultRule) {
  EXPECT_EQ(VerdictOn(ExitedWith(1), nullptr, VerdictTable::Defaults()), std::nullopt);
  RankState r = ExitedWith(1);
  r.exception_type = "ValueError";
  EXPECT_EQ(VerdictOn(r, nullptr, VerdictTable::Defaults()), std::nullopt);
  RankState killed = Rank();
  killed.death = RankDeath{absl::UnixEpoch(), true, 0, 9};
  EXPECT_EQ(VerdictOn(killed, nullptr, VerdictTable::Defaults()), std::nullopt);
  // An operator switched Megatron's rule off.
  VerdictTable table = VerdictTable::Defaults();
  table.Set(*ParseVerdictRule("exit:16=default"));
  EXPECT_EQ(VerdictOn(ExitedWith(16), nullptr, table), std::nullopt);
}

}  // namespace
}  // namespace trainsup
