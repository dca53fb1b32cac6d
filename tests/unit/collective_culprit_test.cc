#include "daemon/core/collective_culprit.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

CollectiveOp Collective(int64_t seq, const std::string& op, CollectiveState state) {
  CollectiveOp c;
  c.seq = seq;
  c.op = op;
  c.state = state;
  return c;
}

CollectiveOp P2p(int64_t seq, const std::string& op, int32_t peer, CollectiveState state) {
  CollectiveOp c = Collective(seq, op, state);
  c.p2p = true;
  c.peer = peer;
  return c;
}

// A group whose collectives were enqueued up to `entered` and completed up
// to `completed` (timing off: started as completed), the last one named `op`.
GroupRecord Group(const std::string& name, const std::string& desc, std::vector<uint32_t> ranks,
                  int64_t entered, int64_t completed, const std::string& op = "all_reduce") {
  GroupRecord g;
  g.name = name;
  g.desc = desc;
  g.ranks = std::move(ranks);
  g.collectives = {entered, completed, completed};
  g.from_pg_status = true;
  if (entered > 1) {
    g.last_collectives.push_back(Collective(entered - 1, op, CollectiveState::kCompleted));
  }
  if (entered > 0) {
    g.last_collectives.push_back(Collective(
        entered, op,
        completed >= entered ? CollectiveState::kCompleted : CollectiveState::kScheduled));
  }
  return g;
}

FlightRecord Record(std::vector<GroupRecord> groups) {
  FlightRecord r;
  r.version = "2.10";
  r.groups = std::move(groups);
  return r;
}

// tests/testdata/flight_recorder/hang_rank*.pkl as the agent reads them
// (flight_recorder_test.cc checks the same figures): ranks 0, 1 and 3
// enqueued all_reduce #7 of the default group and wait; rank 2 stopped
// after #6.
std::map<uint32_t, FlightRecord> FourRankHang() {
  std::map<uint32_t, FlightRecord> dumps;
  for (uint32_t rank : {0u, 1u, 3u}) {
    dumps[rank] = Record({Group("0", "default_pg", {0, 1, 2, 3}, 7, 6)});
  }
  dumps[2] = Record({Group("0", "default_pg", {0, 1, 2, 3}, 6, 6)});
  return dumps;
}

TEST(CollectiveCulpritTest, RankTwoNeverEnteredTheAllReduceTheOthersWaitIn) {
  const CollectiveCulprit c = FindCollectiveCulprit(FourRankHang(), 4);
  EXPECT_EQ(c.evidence, CulpritEvidence::kDump);
  EXPECT_EQ(c.pg, "0");
  EXPECT_EQ(c.pg_desc, "default_pg");
  EXPECT_FALSE(c.p2p);
  EXPECT_EQ(c.seq, 7);
  EXPECT_EQ(c.op, "all_reduce");
  EXPECT_THAT(c.not_entered, ElementsAre(2));
  EXPECT_THAT(c.waiting, ElementsAre(0, 1, 3));
  EXPECT_THAT(c.without_dump, IsEmpty());
  EXPECT_EQ(c.text, "rank 2 never entered all_reduce #7 of pg 0 (default_pg) that ranks 0-1, 3 "
                    "wait in");
}

TEST(CollectiveCulpritTest, EveryRankPastTheSameCollectiveIsUndetermined) {
  std::map<uint32_t, FlightRecord> dumps;
  for (uint32_t rank = 0; rank < 4; ++rank) {
    dumps[rank] = Record({Group("0", "default_pg", {0, 1, 2, 3}, 7, 7)});
  }
  const CollectiveCulprit c = FindCollectiveCulprit(dumps, 4);
  EXPECT_EQ(c.evidence, CulpritEvidence::kUndetermined);
  EXPECT_THAT(c.not_entered, IsEmpty());
  EXPECT_THAT(c.waiting, IsEmpty());
  EXPECT_THAT(c.text, StartsWith("every rank reached all_reduce #7 of pg 0 (default_pg)"));
  EXPECT_THAT(c.text, HasSubstr("; undetermined"));
}

TEST(CollectiveCulpritTest, EveryRankWaitingInTheSameCollectiveIsUndetermined) {
  // The collective itself hangs (a link, NCCL, a GPU): no rank stayed out.
  std::map<uint32_t, FlightRecord> dumps;
  for (uint32_t rank = 0; rank < 4; ++rank) {
    dumps[rank] = Record({Group("0", "default_pg", {0, 1, 2, 3}, 7, 6)});
  }
  const CollectiveCulprit c = FindCollectiveCulprit(dumps, 4);
  EXPECT_EQ(c.evidence, CulpritEvidence::kUndetermined);
  EXPECT_THAT(c.not_entered, IsEmpty());
  EXPECT_THAT(c.waiting, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(c.text, StartsWith("every rank reached all_reduce #7 of pg 0 (default_pg) and "
                                 "waits in it; undetermined"));
}

TEST(CollectiveCulpritTest, AMissingDumpIsSaidAndNotClaimedAsCertain) {
  // Rank 2, the one short of #7, gave no dump: only its absence points at it.
  std::map<uint32_t, FlightRecord> dumps = FourRankHang();
  dumps.erase(2);
  const CollectiveCulprit c = FindCollectiveCulprit(dumps, 4);
  EXPECT_EQ(c.evidence, CulpritEvidence::kAbsence);
  EXPECT_THAT(c.not_entered, IsEmpty());
  EXPECT_THAT(c.without_dump, ElementsAre(2));
  EXPECT_THAT(c.waiting, ElementsAre(0, 1, 3));
  EXPECT_EQ(c.text, "rank 2 gave no dump; ranks 0-1, 3 reached all_reduce #7 of pg 0 (default_pg) "
                    "and wait in it: suspected by absence only (weaker evidence)");
  EXPECT_THAT(c.text, ::testing::Not(HasSubstr("never entered")));
}

TEST(CollectiveCulpritTest, AMissingDumpBesideTheCulpritIsNamedAsWeakerEvidence) {
  std::map<uint32_t, FlightRecord> dumps = FourRankHang();
  dumps.erase(3);
  const CollectiveCulprit c = FindCollectiveCulprit(dumps, 4);
  EXPECT_EQ(c.evidence, CulpritEvidence::kDump);
  EXPECT_THAT(c.not_entered, ElementsAre(2));
  EXPECT_THAT(c.without_dump, ElementsAre(3));
  EXPECT_EQ(c.text, "rank 2 never entered all_reduce #7 of pg 0 (default_pg) that ranks 0-1 wait "
                    "in; rank 3 gave no dump (weaker evidence: it may be short of it too)");
}

TEST(CollectiveCulpritTest, WithoutTheGroupsRanksTheWorldSizeSaysWhoIsMissing) {
  // A writer without pg_config: the default group is the whole job.
  std::map<uint32_t, FlightRecord> dumps;
  for (uint32_t rank : {0u, 1u, 3u}) dumps[rank] = Record({Group("0", "default_pg", {}, 7, 6)});
  const CollectiveCulprit c = FindCollectiveCulprit(dumps, 4);
  EXPECT_EQ(c.evidence, CulpritEvidence::kAbsence);
  EXPECT_THAT(c.without_dump, ElementsAre(2));
  // Without the world size nobody is known to be missing.
  EXPECT_EQ(FindCollectiveCulprit(dumps, 0).evidence, CulpritEvidence::kUndetermined);
}

TEST(CollectiveCulpritTest, NoDumpsSaySo) {
  const CollectiveCulprit c = FindCollectiveCulprit({}, 8);
  EXPECT_EQ(c.evidence, CulpritEvidence::kNoDumps);
  EXPECT_THAT(c.text, HasSubstr("undetermined"));
  // Dumps that saw no collective at all.
  std::map<uint32_t, FlightRecord> empty = {{0, Record({})}, {1, Record({})}};
  EXPECT_EQ(FindCollectiveCulprit(empty, 2).evidence, CulpritEvidence::kUndetermined);
}

TEST(CollectiveCulpritTest, ARankWhoseDumpLacksTheGroupNeverEnteredIt) {
  // pg_status lists a group once a collective of it was recorded.
  std::map<uint32_t, FlightRecord> dumps = FourRankHang();
  dumps[2] = Record({});
  const CollectiveCulprit c = FindCollectiveCulprit(dumps, 4);
  EXPECT_EQ(c.evidence, CulpritEvidence::kDump);
  EXPECT_THAT(c.not_entered, ElementsAre(2));
}

TEST(CollectiveCulpritTest, TheGroupWhoseCulpritIsHeldNowhereElseExplainsTheHang) {
  // Rank 3 stopped in Python. Its tensor-parallel peer, rank 2, waits in
  // all_gather #12 of pg 2 (tp); ranks 0 and 1 went on to all_reduce #30 of
  // the default group, which ranks 2 and 3 never entered. The default
  // group's finding names rank 2, held in pg 2: a consequence. Pg 2's names
  // rank 3, held nowhere.
  std::map<uint32_t, FlightRecord> dumps;
  const std::vector<uint32_t> world = {0, 1, 2, 3};
  dumps[0] = Record({Group("0", "default_pg", world, 30, 29), Group("1", "tp", {0, 1}, 12, 12)});
  dumps[1] = Record({Group("0", "default_pg", world, 30, 29), Group("1", "tp", {0, 1}, 12, 12)});
  dumps[2] = Record(
      {Group("0", "default_pg", world, 29, 29), Group("2", "tp", {2, 3}, 12, 11, "all_gather")});
  dumps[3] = Record(
      {Group("0", "default_pg", world, 29, 29), Group("2", "tp", {2, 3}, 11, 11, "all_gather")});
  const CollectiveCulprit c = FindCollectiveCulprit(dumps, 4);
  EXPECT_EQ(c.evidence, CulpritEvidence::kDump);
  EXPECT_EQ(c.pg, "2");
  EXPECT_EQ(c.op, "all_gather");
  EXPECT_EQ(c.seq, 12);
  EXPECT_THAT(c.not_entered, ElementsAre(3));
  EXPECT_THAT(c.waiting, ElementsAre(2));
  EXPECT_EQ(c.text, "rank 3 never entered all_gather #12 of pg 2 (tp) that rank 2 waits in");
}

TEST(CollectiveCulpritTest, TheSmallestLagWinsBetweenGroupsThatBothExplain) {
  // Rank 1 is short of both groups' collectives and held in neither: the
  // group it fell behind by one explains it more recently than the one it
  // fell behind by three (#40 of pg 0 against #9 of pg 1).
  std::map<uint32_t, FlightRecord> dumps;
  dumps[0] = Record({Group("0", "default_pg", {0, 1}, 40, 39), Group("1", "dp", {0, 1}, 9, 8)});
  dumps[1] = Record({Group("0", "default_pg", {0, 1}, 37, 37), Group("1", "dp", {0, 1}, 8, 8)});
  const CollectiveCulprit c = FindCollectiveCulprit(dumps, 2);
  EXPECT_EQ(c.pg, "1");
  EXPECT_EQ(c.seq, 9);
  EXPECT_THAT(c.not_entered, ElementsAre(1));
}

// tests/testdata/flight_recorder/p2p_rank*.pkl as the agent reads them:
// group 1 (pp) carries rank 0's sends to rank 1; rank 0's third waits, rank
// 1 completed two receives and posted no third. The reader keeps group 1's
// collectives at -1 (its pg_status counts sends); the default group is past
// all_reduce #2 on both.
std::map<uint32_t, FlightRecord> PipelineHang() {
  std::map<uint32_t, FlightRecord> dumps;
  for (uint32_t rank : {0u, 1u}) {
    GroupRecord pp;
    pp.name = "1";
    pp.desc = "pp";
    pp.ranks = {0, 1};
    if (rank == 0) {
      pp.p2p = {3, 2, 2};
      pp.last_p2p = {P2p(2, "send 0->1", 1, CollectiveState::kCompleted),
                     P2p(3, "send 0->1", 1, CollectiveState::kScheduled)};
    } else {
      pp.p2p = {2, 2, 2};
      pp.last_p2p = {P2p(1, "recv 1<-0", 0, CollectiveState::kCompleted),
                     P2p(2, "recv 1<-0", 0, CollectiveState::kCompleted)};
    }
    dumps[rank] = Record({Group("0", "default_pg", {0, 1}, 2, 2), pp});
  }
  return dumps;
}

TEST(CollectiveCulpritTest, ASendWaitsForAReceiveItsPeerNeverPosted) {
  const CollectiveCulprit c = FindCollectiveCulprit(PipelineHang(), 2);
  EXPECT_EQ(c.evidence, CulpritEvidence::kDump);
  EXPECT_TRUE(c.p2p);
  EXPECT_EQ(c.pg, "1");
  EXPECT_EQ(c.seq, 3);
  EXPECT_EQ(c.op, "send 0->1");
  EXPECT_THAT(c.not_entered, ElementsAre(1));
  EXPECT_THAT(c.waiting, ElementsAre(0));
  EXPECT_EQ(c.text,
            "rank 1 never entered the other end of send 0->1 (p2p #3 of pg 1 (pp)) that rank 0 "
            "waits in");
}

TEST(CollectiveCulpritTest, APairWaitingOnEachOtherNamesNoCulprit) {
  std::map<uint32_t, FlightRecord> dumps = PipelineHang();
  GroupRecord& pp = dumps[1].groups[1];
  pp.last_p2p.push_back(P2p(3, "recv 1<-0", 0, CollectiveState::kScheduled));
  pp.p2p = {3, 2, 2};
  const CollectiveCulprit c = FindCollectiveCulprit(dumps, 2);
  EXPECT_EQ(c.evidence, CulpritEvidence::kUndetermined);
  EXPECT_THAT(c.not_entered, IsEmpty());
}

TEST(CollectiveCulpritTest, SendCountsAreNeverComparedWithCollectiveCounts) {
  // Rank 1 did more sends than rank 0 did collectives in the same group:
  // no collective of the group was entered by anyone, so no finding there.
  std::map<uint32_t, FlightRecord> dumps = PipelineHang();
  for (auto& [rank, record] : dumps) record.groups.erase(record.groups.begin());
  dumps[1].groups[0].p2p = {9, 9, 9};
  dumps[1].groups[0].last_p2p = {P2p(9, "recv 1<-0", 0, CollectiveState::kCompleted)};
  const CollectiveCulprit c = FindCollectiveCulprit(dumps, 2);
  EXPECT_TRUE(c.p2p);
  EXPECT_EQ(c.seq, 3);  // rank 0's own count
  EXPECT_THAT(c.not_entered, ElementsAre(1));
  EXPECT_THAT(c.text, ::testing::Not(HasSubstr("#9")));
}

TEST(CollectiveCulpritTest, RanksReadAsRanges) {
  EXPECT_EQ(RankRanges({}), "no rank");
  EXPECT_EQ(RankRanges({3}), "rank 3");
  EXPECT_EQ(RankRanges({0, 1, 2}), "ranks 0-2");
  EXPECT_EQ(RankRanges({0, 1, 3, 7, 8, 9}), "ranks 0-1, 3, 7-9");
  std::vector<uint32_t> every_other;
  for (uint32_t r = 0; r < 24; r += 2) every_other.push_back(r);
  EXPECT_EQ(RankRanges(every_other), "ranks 0, 2, 4, 6, 8, 10, 12, 14 and 4 more");
}

}  // namespace
}  // namespace trainsup
