// The event-kind table (common/event_kinds.cc): one row a kind, and every
// place a row points at exists (its doc names the kind, its alert is a rule,
// the metrics doc lists it among the counter's kinds).
#include "common/event_kinds.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

std::string ReadSourceFile(const std::string& path) {
  std::ifstream in(std::string(TRAINSUP_SOURCE_DIR) + "/" + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(EventKindTableTest, RowIIsKindI) {
  ASSERT_EQ(EventKindTable().size(), static_cast<size_t>(kEventKindCount));
  for (int i = 0; i < kEventKindCount; ++i) {
    EXPECT_EQ(static_cast<int>(EventKindTable()[i].kind), i) << EventKindTable()[i].name;
  }
}

TEST(EventKindTableTest, NamesAreDistinctSnakeCaseAndReadBack) {
  std::set<std::string> names;
  for (const EventKindInfo& row : EventKindTable()) {
    const std::string name = row.name;
    ASSERT_FALSE(name.empty());
    for (char c : name) EXPECT_TRUE((c >= 'a' && c <= 'z') || c == '_') << name;
    EXPECT_TRUE(names.insert(name).second) << name << " twice";
    EXPECT_EQ(EventKindName(row.kind), name);
    EXPECT_EQ(EventKindFromName(name), row.kind);
  }
}

TEST(EventKindTableTest, OutOfRangeIsUnknownAndAnUnknownNameIsNone) {
  EXPECT_EQ(EventKindName(EventKind::kCount), "unknown");
  EXPECT_EQ(EventKindName(static_cast<EventKind>(-1)), "unknown");
  EXPECT_FALSE(EventKindFromName("crashes").has_value());
  EXPECT_FALSE(EventKindFromName("").has_value());
  EXPECT_FALSE(EventKindFromName("unknown").has_value());
}

// A training signal or a resume finding tells the operator what to do:
// diagnose's signals check shows it.
TEST(EventKindTableTest, EverySignalAndResumeFindingSaysWhatToDo) {
  for (const EventKindInfo& row : EventKindTable()) {
    if (row.family != EventFamily::kSignal && row.family != EventFamily::kResume) continue;
    ASSERT_NE(row.diagnose_fix, nullptr) << row.name;
    EXPECT_GT(std::string(row.diagnose_fix).size(), 20u) << row.name;
  }
}

TEST(EventKindTableTest, EveryKindIsInTheDocItNames) {
  for (const EventKindInfo& row : EventKindTable()) {
    ASSERT_NE(row.doc, nullptr) << row.name;
    const std::string doc = ReadSourceFile(absl::StrCat("docs/", row.doc));
    ASSERT_FALSE(doc.empty()) << "docs/" << row.doc << " of " << row.name;
    EXPECT_NE(doc.find(absl::StrCat("`", row.name, "`")), std::string::npos)
        << "docs/" << row.doc << " does not name `" << row.name << "`";
  }
}

TEST(EventKindTableTest, EveryAlertNamedIsARule) {
  const std::string rules = ReadSourceFile("deploy/prometheus/trainsup-rules.yml");
  ASSERT_FALSE(rules.empty());
  int alerts = 0;
  for (const EventKindInfo& row : EventKindTable()) {
    if (row.alert == nullptr) continue;
    ++alerts;
    EXPECT_NE(rules.find(absl::StrCat("- alert: ", row.alert, "\n")), std::string::npos)
        << row.name << "'s alert " << row.alert;
  }
  EXPECT_GT(alerts, 0);
}

// docs/metrics.md lists the kinds of trainsup_job_events_total.
TEST(EventKindTableTest, TheMetricsDocListsEveryKindOfTheEventsCounter) {
  const std::string metrics = ReadSourceFile("docs/metrics.md");
  const size_t row = metrics.find("| `trainsup_job_events_total` |");
  ASSERT_NE(row, std::string::npos);
  const std::string line = metrics.substr(row, metrics.find('\n', row) - row);
  for (const EventKindInfo& kind : EventKindTable()) {
    EXPECT_NE(line.find(absl::StrCat("`", kind.name, "`")), std::string::npos) << kind.name;
  }
}

TEST(EventKindTableTest, FamiliesHaveNames) {
  for (const EventKindInfo& row : EventKindTable()) {
    EXPECT_NE(EventFamilyName(row.family), "unknown") << row.name;
  }
}

}  // namespace
}  // namespace trainsup
