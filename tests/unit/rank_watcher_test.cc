// Reading a zombie's exit status from /proc/PID/stat (agent/rank_watcher.h).
#include "agent/rank_watcher.h"

#include <sys/wait.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

// A /proc/PID/stat line: pid, (comm), state, then fields 4..52 with
// `last` as field 52 (the wait status).
std::string StatLine(const std::string& comm, const std::string& state, const std::string& last) {
  std::string line = absl::StrCat("4242 (", comm, ") ", state);
  for (int field = 4; field < 52; ++field) absl::StrAppend(&line, " 0");
  return absl::StrCat(line, " ", last);
}

TEST(ZombieWaitStatusTest, ReadsTheWaitStatusOfAZombie) {
  EXPECT_EQ(ZombieWaitStatus(StatLine("python3", "Z", "256")), 256);  // exit code 1
  std::optional<int> killed = ZombieWaitStatus(StatLine("python3", "Z", "9"));
  ASSERT_TRUE(killed.has_value());
  EXPECT_TRUE(WIFSIGNALED(*killed));
  EXPECT_EQ(WTERMSIG(*killed), 9);
}

TEST(ZombieWaitStatusTest, ACommandNameWithSpacesAndParenthesesIsSkipped) {
  EXPECT_EQ(ZombieWaitStatus(StatLine("pt_main (x) Z 1", "Z", "512")), 512);
}

TEST(ZombieWaitStatusTest, ALiveProcessHasNone) {
  EXPECT_EQ(ZombieWaitStatus(StatLine("python3", "S", "0")), std::nullopt);
  EXPECT_EQ(ZombieWaitStatus(StatLine("python3", "R", "0")), std::nullopt);
}

TEST(ZombieWaitStatusTest, MalformedLinesHaveNoneAndDoNotThrow) {
  EXPECT_EQ(ZombieWaitStatus(""), std::nullopt);
  EXPECT_EQ(ZombieWaitStatus("4242 (python3"), std::nullopt);
  EXPECT_EQ(ZombieWaitStatus("4242 (python3)"), std::nullopt);  // ends at the ')'
  EXPECT_EQ(ZombieWaitStatus("4242 (python3) Z 1 2 3"), std::nullopt);  // too few fields
  EXPECT_EQ(ZombieWaitStatus(StatLine("python3", "Z", "")), std::nullopt);
  EXPECT_EQ(ZombieWaitStatus(StatLine("python3", "Z", "x1")), std::nullopt);
  EXPECT_EQ(ZombieWaitStatus(StatLine("python3", "Z", "99999999999999999999")), std::nullopt);
}

}  // namespace
}  // namespace trainsup
