// The checkpoint schedule every rank evaluates (ShouldCheckpoint,
// NextCheckpointStep): its semantics, a table shared with the python helper's
// test, and the property the design rests on: ranks that receive each plan
// before its effective_from_step agree on every step, whatever the delays.
#include "daemon/core/checkpoint_schedule.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace trainsup {
namespace {

// {plan_id, anchor_step, interval_steps, effective_from_step, one_off_steps}
CheckpointPlanSpec Plan(uint64_t id, int64_t anchor, int64_t interval, int64_t effective_from,
                        std::vector<int64_t> one_offs = {}) {
  CheckpointPlanSpec p;
  p.plan_id = id;
  p.anchor_step = anchor;
  p.interval_steps = interval;
  p.effective_from_step = effective_from;
  p.one_off_steps = std::move(one_offs);
  return p;
}

// The checkpoint steps in [begin, end).
std::vector<int64_t> CheckpointSteps(const std::vector<CheckpointPlanSpec>& plans, int64_t begin,
                                     int64_t end) {
  std::vector<int64_t> out;
  for (int64_t s = begin; s < end; ++s) {
    if (ShouldCheckpoint(plans, s)) out.push_back(s);
  }
  return out;
}

using Steps = std::vector<int64_t>;

// ---------------------------------------------------------------------------
// Semantics

TEST(ShouldCheckpointTest, NoPlansMeansNoCheckpoints) {
  EXPECT_EQ(CheckpointSteps({}, -10, 100), Steps{});
}

TEST(ShouldCheckpointTest, PeriodicStepsCountFromTheAnchor) {
  EXPECT_EQ(CheckpointSteps({Plan(1, 3, 5, 0)}, 0, 30), (Steps{3, 8, 13, 18, 23, 28}));
}

TEST(ShouldCheckpointTest, NothingBeforeTheEffectiveFromStepOfTheOnlyPlan) {
  // The anchor lies before effective_from: the periodic steps before it do
  // not count.
  EXPECT_EQ(CheckpointSteps({Plan(1, 0, 4, 10)}, -20, 30), (Steps{12, 16, 20, 24, 28}));
  // effective_from on a periodic step: that step is the first one.
  EXPECT_EQ(CheckpointSteps({Plan(1, 0, 4, 12)}, 0, 20), (Steps{12, 16}));
}

TEST(ShouldCheckpointTest, NothingBeforeTheAnchorEitherWhenItIsAfterEffectiveFrom) {
  EXPECT_EQ(CheckpointSteps({Plan(1, 13, 5, 10)}, 0, 30), (Steps{13, 18, 23, 28}));
}

TEST(ShouldCheckpointTest, LaterPlanTakesOverExactlyAtItsEffectiveFromStep) {
  const std::vector<CheckpointPlanSpec> plans = {Plan(1, 0, 10, 0), Plan(2, 25, 7, 25)};
  // Before 25 the old plan decides (steps 0, 10, 20); from 25 the new one
  // (25, 32, 39), and the old plan's 30 and 40 are gone.
  EXPECT_EQ(CheckpointSteps(plans, 0, 45), (Steps{0, 10, 20, 25, 32, 39}));
  EXPECT_TRUE(ShouldCheckpoint(plans, 20));
  EXPECT_FALSE(ShouldCheckpoint(plans, 24));
  EXPECT_TRUE(ShouldCheckpoint(plans, 25));
  EXPECT_FALSE(ShouldCheckpoint(plans, 30));
}

TEST(ShouldCheckpointTest, PlanAnchoredBeforeItsEffectiveFromStepKeepsItsPhase) {
  // Anchored at 3, every 6, from 20: 21, 27, ...; the old plan (every 5 from
  // 0) decides up to 19.
  const std::vector<CheckpointPlanSpec> plans = {Plan(1, 0, 5, 0), Plan(2, 3, 6, 20)};
  EXPECT_EQ(CheckpointSteps(plans, 0, 35), (Steps{0, 5, 10, 15, 21, 27, 33}));
}

TEST(ShouldCheckpointTest, EqualEffectiveFromTheHigherPlanIdWinsWhateverTheOrder) {
  const CheckpointPlanSpec low = Plan(5, 10, 3, 10);
  const CheckpointPlanSpec high = Plan(7, 10, 4, 10);
  const Steps expected = {10, 14, 18, 22};
  EXPECT_EQ(CheckpointSteps({low, high}, 0, 25), expected);
  EXPECT_EQ(CheckpointSteps({high, low}, 0, 25), expected);
}

TEST(ShouldCheckpointTest, GreatestEffectiveFromDecidesNotTheGreatestPlanId) {
  // The documented rule: plan 3 (from 10) decides 10..29, plan 2 (from 30)
  // decides from 30 on although its id is lower.
  const std::vector<CheckpointPlanSpec> plans = {Plan(2, 30, 10, 30), Plan(3, 0, 4, 10)};
  EXPECT_EQ(CheckpointSteps(plans, 0, 45), (Steps{12, 16, 20, 24, 28, 30, 40}));
}

TEST(ShouldCheckpointTest, OneOffStepsOfAnyPlanCountEvenASupersededOne) {
  // Plan 1's one-off at 7 still counts after plan 2 took over at 5; plan 2
  // has no periodic checkpoints, only its one-off at 13.
  const std::vector<CheckpointPlanSpec> plans = {Plan(1, 0, 10, 0, {7}), Plan(2, 5, 0, 5, {13})};
  EXPECT_EQ(CheckpointSteps(plans, 0, 40), (Steps{0, 7, 13}));
}

TEST(ShouldCheckpointTest, OneOffStepCountsBeforeItsPlansEffectiveFromStep) {
  EXPECT_EQ(CheckpointSteps({Plan(3, 100, 10, 100, {42})}, 0, 60), Steps{42});
}

TEST(ShouldCheckpointTest, IntervalZeroMeansNoPeriodicCheckpoints) {
  EXPECT_EQ(CheckpointSteps({Plan(1, 0, 0, 0)}, -5, 100), Steps{});
  // ... and it switches off an earlier plan from its effective_from step.
  EXPECT_EQ(CheckpointSteps({Plan(1, 0, 5, 0), Plan(2, 12, 0, 12)}, 0, 40),
            (Steps{0, 5, 10}));
}

TEST(ShouldCheckpointTest, NegativeIntervalMeansNoPeriodicCheckpoints) {
  EXPECT_EQ(CheckpointSteps({Plan(1, 0, -3, 0)}, -10, 30), Steps{});
}

TEST(ShouldCheckpointTest, AnswerDoesNotDependOnTheOrderOfThePlans) {
  std::vector<CheckpointPlanSpec> plans = {Plan(1, 0, 10, 0, {3}), Plan(2, 20, 6, 20),
                                           Plan(3, 20, 4, 20), Plan(4, 37, 9, 35, {50})};
  const Steps expected = CheckpointSteps(plans, 0, 80);
  std::sort(plans.begin(), plans.end(),
            [](const CheckpointPlanSpec& a, const CheckpointPlanSpec& b) {
              return a.plan_id > b.plan_id;
            });
  EXPECT_EQ(CheckpointSteps(plans, 0, 80), expected);
  EXPECT_EQ(expected, (Steps{0, 3, 10, 20, 24, 28, 32, 37, 46, 50, 55, 64, 73}));
}

TEST(NextCheckpointStepTest, FirstCheckpointStepAtOrAfterFrom) {
  const std::vector<CheckpointPlanSpec> plans = {Plan(1, 10, 5, 10)};
  EXPECT_EQ(NextCheckpointStep(plans, 0), 10);
  EXPECT_EQ(NextCheckpointStep(plans, 11), 15);
  EXPECT_EQ(NextCheckpointStep(plans, 15), 15);  // inclusive
  EXPECT_EQ(NextCheckpointStep(plans, 16), 20);
}

TEST(NextCheckpointStepTest, FindsOneOffSteps) {
  const std::vector<CheckpointPlanSpec> plans = {Plan(1, 0, 100, 0), Plan(2, 0, 100, 0, {137})};
  EXPECT_EQ(NextCheckpointStep(plans, 101), 137);
  EXPECT_EQ(NextCheckpointStep(plans, 138), 200);
}

TEST(NextCheckpointStepTest, MinusOneWhenThereIsNone) {
  EXPECT_EQ(NextCheckpointStep({}, 0), -1);
  EXPECT_EQ(NextCheckpointStep({Plan(1, 0, 0, 0)}, 0), -1);
  // Past the last one-off, with no periodic schedule.
  EXPECT_EQ(NextCheckpointStep({Plan(1, 0, 0, 0, {7})}, 8), -1);
}

TEST(NextCheckpointStepTest, LooksOnlyWithinTheLimit) {
  const std::vector<CheckpointPlanSpec> plans = {Plan(1, 0, 100, 0)};
  EXPECT_EQ(NextCheckpointStep(plans, 1, 99), -1);    // 1..99
  EXPECT_EQ(NextCheckpointStep(plans, 1, 100), 100);  // 1..100
}

// ---------------------------------------------------------------------------
// The shared table.
//
// THE SAME TABLE IS IN tests/python/test_helper.py (SHARED_TABLE): the python
// helper's should_checkpoint must answer exactly as ShouldCheckpoint. Change
// both together. Each case: plans as (plan_id, anchor, interval,
// effective_from, one-offs), and every checkpoint step in [-5, end).

struct TableCase {
  const char* name;
  std::vector<CheckpointPlanSpec> plans;
  int64_t end;
  Steps checkpoint_steps;
};

const std::vector<TableCase>& SharedTable() {
  static const auto* const kTable = new std::vector<TableCase>{
      {"no plans", {}, 30, {}},
      {"periodic from the anchor", {Plan(1, 10, 5, 10)}, 40, {10, 15, 20, 25, 30, 35}},
      {"nothing before effective_from", {Plan(1, 0, 4, 10)}, 30, {12, 16, 20, 24, 28}},
      {"nothing before the anchor", {Plan(1, 13, 5, 10)}, 30, {13, 18, 23, 28}},
      {"later plan takes over at its effective_from",
       {Plan(1, 0, 10, 0), Plan(2, 25, 7, 25)},
       45,
       {0, 10, 20, 25, 32, 39}},
      {"later plan anchored before its effective_from",
       {Plan(1, 0, 5, 0), Plan(2, 3, 6, 20)},
       35,
       {0, 5, 10, 15, 21, 27, 33}},
      {"equal effective_from: higher plan_id wins",
       {Plan(5, 10, 3, 10), Plan(7, 10, 4, 10)},
       25,
       {10, 14, 18, 22}},
      {"equal effective_from: higher plan_id wins, listed first",
       {Plan(7, 10, 4, 10), Plan(5, 10, 3, 10)},
       25,
       {10, 14, 18, 22}},
      {"greatest effective_from wins over a higher plan_id",
       {Plan(2, 30, 10, 30), Plan(3, 0, 4, 10)},
       45,
       {12, 16, 20, 24, 28, 30, 40}},
      {"one-offs of a superseded plan count",
       {Plan(1, 0, 10, 0, {7}), Plan(2, 5, 0, 5, {13})},
       40,
       {0, 7, 13}},
      {"one-off before its plan's effective_from", {Plan(3, 100, 10, 100, {42})}, 60, {42}},
      {"interval 0 means none", {Plan(1, 0, 0, 0)}, 30, {}},
      {"interval 0 switches an older plan off",
       {Plan(1, 0, 5, 0), Plan(2, 12, 0, 12)},
       40,
       {0, 5, 10}},
      {"negative anchor and steps",
       {Plan(1, -7, 3, -5)},
       6,
       {-4, -1, 2, 5}},
      {"a plan of the supervisor and an operator's one-off",
       {Plan(1000000, 105, 40, 105), Plan(1000001, 105, 40, 105, {117})},
       200,
       {105, 117, 145, 185}},
  };
  return *kTable;
}

TEST(ShouldCheckpointTest, SharedTableWithThePythonHelper) {
  for (const TableCase& c : SharedTable()) {
    EXPECT_EQ(CheckpointSteps(c.plans, -5, c.end), c.checkpoint_steps) << c.name;
  }
}

// ---------------------------------------------------------------------------
// The property: consistency across ranks.
//
// A job of R ranks advances in lockstep, one step per tick. At tick p (every
// rank has decided steps <= p) the supervisor may publish a plan that takes
// effect at p + H. Rank r holds it when it decides step t > p + delay(r, plan).
// Each rank decides every step with only the plans it holds.

struct Published {
  int64_t at_step;  // the publisher's current step
  CheckpointPlanSpec spec;
};

// A random sequence of plans over `steps` steps with horizon `horizon`, as
// the supervisor publishes them: periodic plans (random interval, 0 included,
// random anchor), and an operator's one-off (a copy of the last plan, with a
// higher id and a one-off step at p + H).
std::vector<Published> RandomPlans(std::mt19937& rng, int64_t steps, int64_t horizon) {
  std::vector<Published> out;
  std::uniform_int_distribution<int> percent(0, 99);
  std::uniform_int_distribution<int64_t> interval(0, 25);
  std::uniform_int_distribution<int64_t> anchor_offset(-20, 20);
  uint64_t next_id = 1'000'000 + rng() % 1000;
  for (int64_t p = 0; p < steps; ++p) {
    const int roll = percent(rng);
    if (roll < 3) {
      CheckpointPlanSpec spec;
      spec.plan_id = next_id++;
      spec.effective_from_step = p + horizon;
      // Mostly anchored at effective_from, as the supervisor does; any
      // anchor must do.
      spec.anchor_step = percent(rng) < 50 ? spec.effective_from_step
                                           : spec.effective_from_step + anchor_offset(rng);
      spec.interval_steps = interval(rng);
      out.push_back({p, spec});
    } else if (roll < 4) {
      CheckpointPlanSpec spec = out.empty() ? CheckpointPlanSpec() : out.back().spec;
      spec.plan_id = next_id++;
      spec.one_off_steps = {p + horizon};
      out.push_back({p, spec});
    }
  }
  return out;
}

// Runs the job; `delay(rank, plan index)` is when the rank gets the plan, in
// steps after its publication. Returns the first step on which the ranks
// disagree, if any.
template <typename Delay>
std::optional<int64_t> FirstDisagreement(const std::vector<Published>& plans, int ranks,
                                         int64_t steps, Delay delay) {
  // When each rank first holds each plan: for decisions of steps > this.
  std::vector<std::vector<int64_t>> held_after(ranks, std::vector<int64_t>(plans.size()));
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < plans.size(); ++i) held_after[r][i] = plans[i].at_step + delay(r, i);
  }
  std::vector<std::vector<CheckpointPlanSpec>> held(ranks);
  std::vector<std::vector<bool>> has(ranks, std::vector<bool>(plans.size(), false));
  for (int64_t t = 0; t < steps; ++t) {
    std::optional<bool> first;
    bool disagree = false;
    for (int r = 0; r < ranks; ++r) {
      for (size_t i = 0; i < plans.size() && plans[i].at_step < t; ++i) {
        if (!has[r][i] && held_after[r][i] < t) {
          has[r][i] = true;
          held[r].push_back(plans[i].spec);
        }
      }
      const bool decision = ShouldCheckpoint(held[r], t);
      if (!first) first = decision;
      if (decision != *first) disagree = true;
    }
    if (disagree) return t;
  }
  return std::nullopt;
}

constexpr int kRanks = 8;
constexpr int64_t kSteps = 3000;

TEST(CheckpointScheduleProperty, RanksAgreeOnEveryStepWhenEachPlanArrivesWithinTheHorizon) {
  int64_t checkpoints_seen = 0;
  size_t plans_seen = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    const int64_t horizon = 1 + static_cast<int64_t>(seed % 12);
    const std::vector<Published> plans = RandomPlans(rng, kSteps, horizon);
    plans_seen += plans.size();
    std::vector<std::vector<int64_t>> delays(kRanks, std::vector<int64_t>(plans.size()));
    std::uniform_int_distribution<int64_t> delay(0, horizon - 1);
    for (auto& row : delays) {
      for (int64_t& d : row) d = delay(rng);
    }
    const std::optional<int64_t> disagreement = FirstDisagreement(
        plans, kRanks, kSteps, [&](int r, size_t i) { return delays[r][i]; });
    EXPECT_EQ(disagreement, std::nullopt) << "seed " << seed << ", horizon " << horizon;

    std::vector<CheckpointPlanSpec> all;
    for (const Published& p : plans) all.push_back(p.spec);
    checkpoints_seen += static_cast<int64_t>(CheckpointSteps(all, 0, kSteps).size());
  }
  // The runs were not vacuous: many plans, many checkpoint steps.
  EXPECT_GT(plans_seen, 1000u);
  EXPECT_GT(checkpoints_seen, 5000);
}

TEST(CheckpointScheduleProperty, RanksThatGetEveryPlanAtOnceAgree) {
  // Sanity of the harness: with no delay at all every rank holds the same.
  std::mt19937 rng(7);
  const std::vector<Published> plans = RandomPlans(rng, kSteps, 5);
  EXPECT_EQ(FirstDisagreement(plans, kRanks, kSteps, [](int, size_t) { return int64_t{0}; }),
            std::nullopt);
}

TEST(CheckpointScheduleProperty, OneRankReceivingAPlanAHorizonLateCanDisagree) {
  // The converse: the horizon is what makes it safe. One rank gets every
  // plan H steps after publication (on the step it takes effect), the rest at
  // once; some seed shows a disagreement, and it is on a plan's
  // effective_from step (or its one-off step).
  int found = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    const int64_t horizon = 1 + static_cast<int64_t>(seed % 12);
    const std::vector<Published> plans = RandomPlans(rng, kSteps, horizon);
    const std::optional<int64_t> disagreement = FirstDisagreement(
        plans, kRanks, kSteps, [&](int r, size_t) { return r == 3 ? horizon : int64_t{0}; });
    if (!disagreement) continue;
    ++found;
    bool at_a_plans_first_step = false;
    for (const Published& p : plans) {
      if (p.at_step + horizon == *disagreement) at_a_plans_first_step = true;
    }
    EXPECT_TRUE(at_a_plans_first_step) << "seed " << seed << " step " << *disagreement;
  }
  EXPECT_GT(found, 0);
}

TEST(CheckpointScheduleProperty, LateRankMissesTheFirstStepOfANewPlan) {
  // The smallest case of the converse, spelled out: every 10 steps from 0;
  // at step 20 a plan "every 7 from 27" (H = 7). A rank that gets it only
  // after deciding step 27 skips the checkpoint the others take there.
  const std::vector<CheckpointPlanSpec> old_plan = {Plan(1, 0, 10, 0)};
  std::vector<CheckpointPlanSpec> both = old_plan;
  both.push_back(Plan(2, 27, 7, 27));
  EXPECT_TRUE(ShouldCheckpoint(both, 27));
  EXPECT_FALSE(ShouldCheckpoint(old_plan, 27));
  // ... and step 30, where the old plan would checkpoint and the new does not.
  EXPECT_FALSE(ShouldCheckpoint(both, 30));
  EXPECT_TRUE(ShouldCheckpoint(old_plan, 30));
}

// NextCheckpointStep jumps between candidates; walking step by step with
// ShouldCheckpoint is the definition it must agree with.
TEST(NextCheckpointStepTest, AgreesWithAStepByStepWalkOnRandomPlans) {
  std::mt19937 random(11);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(random); };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<CheckpointPlanSpec> plans;
    const int n = pick(0, 5);
    for (int i = 0; i < n; ++i) {
      std::vector<int64_t> one_offs;
      for (int k = pick(0, 2); k > 0; --k) one_offs.push_back(pick(0, 300));
      plans.push_back(Plan(static_cast<uint64_t>(pick(1, 9)), pick(0, 200), pick(0, 40),
                           pick(0, 250), one_offs));
    }
    const int64_t from = pick(0, 250);
    const int64_t limit = pick(1, 120);
    int64_t walked = -1;
    for (int64_t s = from; s < from + limit; ++s) {
      if (ShouldCheckpoint(plans, s)) {
        walked = s;
        break;
      }
    }
    ASSERT_EQ(NextCheckpointStep(plans, from, limit), walked) << "trial " << trial;
  }
}

}  // namespace
}  // namespace trainsup
