#include "daemon/core/signals/signal_options.h"

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::HasSubstr;

TEST(SignalSettingsTest, NamesAreUniqueAndEveryDefaultIsInItsRange) {
  std::set<std::string> names;
  const SignalOptions defaults;
  for (const SignalSetting& s : SignalSettings()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_TRUE(SettingAllows(s, s.get(defaults))) << s.name << "=" << s.get(defaults);
    EXPECT_LE(std::string(s.name).size(), kMaxSignalSettingName);
  }
  EXPECT_EQ(FindSignalSetting("loss_shift_window")->get(defaults), 20);
  EXPECT_EQ(FindSignalSetting("non_finite")->get(defaults), 2);
  EXPECT_EQ(FindSignalSetting("throughput_confirm_seconds")->get(defaults), 60);
  EXPECT_EQ(FindSignalSetting("nope"), nullptr);
}

TEST(SignalSettingsTest, SettingsApplyInOrder) {
  SignalOptions options;
  ASSERT_TRUE(ApplySignalSettings({{"loss_flat", 0},
                                   {"loss_shift_sigmas", 8.5},
                                   {"non_finite", 1},
                                   {"throughput_confirm_seconds", 2.5},
                                   {"memory_growth_min_bytes", 1e9},
                                   {"loss_flat", 1}},
                                  &options)
                  .ok());
  EXPECT_TRUE(options.loss_flat.enabled);  // the last one wins
  EXPECT_EQ(options.loss_shift.sigmas, 8.5);
  EXPECT_EQ(options.non_finite.action, NonFiniteAction::kReport);
  EXPECT_EQ(options.throughput.confirm_time, absl::Milliseconds(2500));
  EXPECT_EQ(options.memory.min_bytes, 1e9);
}

TEST(SignalSettingsTest, TheScriptMayAskForSpikeRollbackAndSetTheFallbackCaps) {
  SignalOptions options;
  EXPECT_EQ(options.fallback.on_loss_spike, LossSpikeAction::kReport);
  ASSERT_TRUE(ApplySignalSettings({{"on_loss_spike", 1},
                                   {"fallback_load_steps", 5},
                                   {"fallback_max_rollbacks", 3},
                                   {"spike_skip_steps", 200},
                                   {"spike_max_rollbacks", 1}},
                                  &options)
                  .ok());
  EXPECT_EQ(options.fallback.on_loss_spike, LossSpikeAction::kRollback);
  EXPECT_EQ(options.fallback.load_steps, 5);
  EXPECT_EQ(options.fallback.max_rollbacks, 3);
  EXPECT_EQ(options.fallback.spike_skip_steps, 200);
  EXPECT_EQ(options.fallback.max_spike_rollbacks, 1);
  EXPECT_FALSE(ApplySignalSettings({{"on_loss_spike", 2}}, &options).ok());
}

TEST(SignalSettingsTest, AnUnknownNameOrAValueOutOfRangeIsRefusedAndSaysWhich) {
  SignalOptions options;
  absl::Status s = ApplySignalSettings({{"loss_shift_windw", 5}}, &options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("loss_shift_windw"));
  s = ApplySignalSettings({{"loss_shift_window", 1}}, &options);
  EXPECT_THAT(s.message(), HasSubstr("outside 2..10000"));
  s = ApplySignalSettings({{"grad_collapse_steps", 2.5}}, &options);
  EXPECT_THAT(s.message(), HasSubstr("whole numbers"));
}

TEST(SignalSettingsTest, RulesAreTurnedOffByName) {
  SignalOptions options;
  ASSERT_TRUE(TurnOffRules("loss_flat, throughput,non_finite", &options).ok());
  EXPECT_FALSE(options.loss_flat.enabled);
  EXPECT_FALSE(options.throughput.enabled);
  EXPECT_EQ(options.non_finite.action, NonFiniteAction::kOff);
  EXPECT_TRUE(options.loss_shift.enabled);
  EXPECT_EQ(TurnOffRules("loss_shift_window", &options).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TurnOffRules("", &options).code(), absl::StatusCode::kOk);
}

// The rank helper keeps its own copy of the table, to check a script's
// settings before it sends them (a START with a bad one is refused whole):
// the two must say the same.
TEST(SignalSettingsTest, TheHelpersTableIsTheSame) {
  std::ifstream in(TRAINSUP_SOURCE_DIR "/agent/python/trainsup/__init__.py");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string source = text.str();
  const size_t begin = source.find("_SIGNAL_SETTINGS = {");
  const size_t end = source.find("\n}", begin);
  ASSERT_NE(begin, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  const std::string table = source.substr(begin, end - begin);
  // "name": (min, max, integer),
  const std::regex row(R"re("([a-z_]+)":\s*\(([-0-9.e+]+),\s*([-0-9.e+]+),\s*(True|False)\))re");
  std::set<std::string> seen;
  for (std::sregex_iterator it(table.begin(), table.end(), row), done; it != done; ++it) {
    const std::string name = (*it)[1];
    seen.insert(name);
    const SignalSetting* s = FindSignalSetting(name);
    ASSERT_NE(s, nullptr) << name << " is in the helper, not in the supervisor";
    EXPECT_EQ(std::stod((*it)[2]), s->min) << name;
    EXPECT_EQ(std::stod((*it)[3]), s->max) << name;
    EXPECT_EQ((*it)[4] == "True", s->integer) << name;
  }
  for (const SignalSetting& s : SignalSettings()) {
    EXPECT_TRUE(seen.count(s.name)) << s.name << " is in the supervisor, not in the helper";
  }
}

}  // namespace
}  // namespace trainsup
