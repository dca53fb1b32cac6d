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
