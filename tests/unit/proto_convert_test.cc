// The wire's reject reasons -> the core's: one list under two names.
#include "daemon/proto_convert.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "daemon/core/reject_reason.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/reject_reason_printer.h"
#include "trainsup/v1/agent.pb.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

constexpr char kPrefix[] = "REJECT_REASON_";

TEST(RejectReasonFromProtoTest, EveryWireValueMapsToTheCoreReasonOfTheSameName) {
  const google::protobuf::EnumDescriptor* wire = v1::RejectReason_descriptor();
  for (int i = 0; i < wire->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor* value = wire->value(i);
    ASSERT_TRUE(absl::StartsWith(value->name(), kPrefix)) << value->name();
    if (value->number() == v1::REJECT_REASON_UNSPECIFIED) continue;
    const std::string name = absl::AsciiStrToLower(value->name().substr(sizeof(kPrefix) - 1));
    EXPECT_EQ(RejectReasonName(FromProto(static_cast<v1::RejectReason>(value->number()))), name)
        << value->name();
  }
}

TEST(RejectReasonFromProtoTest, EveryCoreReasonHasAWireValue) {
  const google::protobuf::EnumDescriptor* wire = v1::RejectReason_descriptor();
  for (int i = 0; i < kRejectReasonCount; ++i) {
    const std::string name =
        kPrefix + absl::AsciiStrToUpper(RejectReasonName(static_cast<RejectReason>(i)));
    EXPECT_NE(wire->FindValueByName(name), nullptr) << name;
  }
  // UNSPECIFIED is the one value more.
  EXPECT_EQ(wire->value_count(), kRejectReasonCount + 1);
}

TEST(RejectReasonFromProtoTest, UnspecifiedAndUnknownValuesAreOther) {
  EXPECT_EQ(FromProto(v1::REJECT_REASON_UNSPECIFIED), RejectReason::kOther);
  EXPECT_EQ(FromProto(static_cast<v1::RejectReason>(1000)), RejectReason::kOther);
}

TEST(NodeReportFromProtoTest, AReusedReportKeepsNothingOfThePreviousOne) {
  v1::NodeReport first;
  v1::RankHeartbeat* a = first.add_heartbeats();
  a->set_rank(3);
  a->set_loss(2.5);
  a->set_exit_code(1);
  a->set_exception_type("RuntimeError");
  first.add_heartbeats()->set_rank(4);
  first.add_processes()->set_rank(3);
  v1::RejectCount* rejected = first.add_rejected();
  rejected->set_reject_reason(v1::REJECT_REASON_INVALID_JSON);
  rejected->set_count(2);
  v1::NodeReport second;
  second.add_heartbeats()->set_rank(5);
  NodeReportInfo reused;

  FromProto(first, &reused);
  FromProto(second, &reused);

  ASSERT_EQ(reused.heartbeats.size(), 1u);
  const Heartbeat& hb = reused.heartbeats[0];
  EXPECT_EQ(hb.rank, 5u);
  EXPECT_FALSE(hb.loss.has_value());
  EXPECT_FALSE(hb.exit_code.has_value());
  EXPECT_TRUE(hb.exception_type.empty());
  EXPECT_TRUE(reused.processes.empty());
  EXPECT_TRUE(reused.rejected.empty());
}

TEST(NodeReportFromProtoTest, RejectCountsMappedToTheSameReasonAddUp) {
  v1::NodeReport report;
  auto add = [&report](int reason, uint64_t count) {
    v1::RejectCount* entry = report.add_rejected();
    entry->set_reject_reason(static_cast<v1::RejectReason>(reason));
    entry->set_count(count);
  };
  add(v1::REJECT_REASON_OVERSIZE, 3);
  add(1000, 2);  // from a newer agent
  add(v1::REJECT_REASON_INVALID_JSON, 1);
  add(1001, 4);  // from a newer agent

  EXPECT_THAT(FromProto(report).rejected,
              ElementsAre(Pair(RejectReason::kOversize, 3u), Pair(RejectReason::kOther, 6u),
                          Pair(RejectReason::kInvalidJson, 1u)));
}

}  // namespace
}  // namespace trainsup
