// The job lifecycle's transition table and state names.
#include "daemon/core/job_state.h"

#include <optional>
#include <set>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace trainsup {
namespace {

using S = JobState;

// The intended table, written out independently of the code's own list.
const std::set<std::pair<S, S>>& Allowed() {
  static const auto* const kAllowed = new std::set<std::pair<S, S>>{
      {S::kPending, S::kRunning},      {S::kPending, S::kStopping},
      {S::kPending, S::kFinished},     {S::kPending, S::kFailed},
      {S::kRunning, S::kStopping},     {S::kRunning, S::kFinished},
      {S::kRunning, S::kFailed},       {S::kStopping, S::kRestarting},
      {S::kStopping, S::kHeld},        {S::kStopping, S::kFailed},
      {S::kRestarting, S::kRunning},   {S::kRestarting, S::kHeld},
      {S::kRestarting, S::kFailed},    {S::kHeld, S::kRestarting},
      {S::kHeld, S::kFailed},          {S::kFinished, S::kPending},
      {S::kFailed, S::kPending},       {S::kFailed, S::kRestarting},
      {S::kStopping, S::kKilled},      {S::kKilled, S::kRestarting},
  };
  return *kAllowed;
}

S StateAt(int i) { return static_cast<S>(i); }

TEST(JobStateTest, TableHasTwentyAllowedTransitions) { EXPECT_EQ(Allowed().size(), 20u); }

TEST(JobStateTest, EveryListedTransitionIsAllowed) {
  for (const auto& [from, to] : Allowed()) {
    EXPECT_TRUE(IsAllowedTransition(from, to))
        << JobStateName(from) << " -> " << JobStateName(to);
  }
}

TEST(JobStateTest, EveryOtherPairIsRefused) {
  int refused = 0;
  for (int f = 0; f < kJobStateCount; ++f) {
    for (int t = 0; t < kJobStateCount; ++t) {
      if (Allowed().count({StateAt(f), StateAt(t)}) > 0) continue;
      ++refused;
      EXPECT_FALSE(IsAllowedTransition(StateAt(f), StateAt(t)))
          << JobStateName(StateAt(f)) << " -> " << JobStateName(StateAt(t));
    }
  }
  EXPECT_EQ(refused, kJobStateCount * kJobStateCount - 20);
}

TEST(JobStateTest, NoStateTransitionsToItself) {
  for (int i = 0; i < kJobStateCount; ++i) {
    EXPECT_FALSE(IsAllowedTransition(StateAt(i), StateAt(i))) << JobStateName(StateAt(i));
  }
}

TEST(JobStateTest, HasEightStates) { EXPECT_EQ(kJobStateCount, 8); }

TEST(JobStateTest, NamesAreStableSnakeCase) {
  EXPECT_EQ(JobStateName(S::kPending), "pending");
  EXPECT_EQ(JobStateName(S::kRunning), "running");
  EXPECT_EQ(JobStateName(S::kStopping), "stopping");
  EXPECT_EQ(JobStateName(S::kRestarting), "restarting");
  EXPECT_EQ(JobStateName(S::kHeld), "held");
  EXPECT_EQ(JobStateName(S::kFinished), "finished");
  EXPECT_EQ(JobStateName(S::kFailed), "failed");
  EXPECT_EQ(JobStateName(S::kKilled), "killed");
}

TEST(JobStateTest, NamesRoundTrip) {
  std::set<std::string> names;
  for (int i = 0; i < kJobStateCount; ++i) {
    const absl::string_view name = JobStateName(StateAt(i));
    names.insert(std::string(name));
    EXPECT_EQ(JobStateFromName(name), StateAt(i)) << name;
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kJobStateCount));  // all distinct
}

TEST(JobStateTest, UnknownNameIsNullopt) {
  EXPECT_EQ(JobStateFromName("bogus"), std::nullopt);
  EXPECT_EQ(JobStateFromName(""), std::nullopt);
  EXPECT_EQ(JobStateFromName("Running"), std::nullopt);
  EXPECT_EQ(JobStateFromName("unknown"), std::nullopt);
  EXPECT_EQ(JobStateFromName("running "), std::nullopt);
}

TEST(JobStateTest, CountIsNotAStateName) {
  EXPECT_EQ(JobStateName(S::kCount), "unknown");
}

}  // namespace
}  // namespace trainsup
