// The wire's reject reasons -> the core's: one list under two names; and
// every field of the messages read from agents is mapped.
#include "daemon/proto_convert.h"

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "daemon/core/reject_reason.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/reject_reason_printer.h"
#include "trainsup/v1/agent.pb.h"
#include "trainsup/v1/heartbeat.pb.h"
#include "trainsup/v1/kill_criteria.pb.h"

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

// Fields proto_convert.cc does not read, each on purpose.
const std::set<std::string>& FieldsNotRead() {
  static const auto* const kNotRead = new std::set<std::string>{
      // The rank's own clock: the agent on its host turns it into a
      // failure's time (agent/rank_watcher.cc); trainsupd never compares it.
      "RankHeartbeat.monotonic_seconds",
      // The agent keeps it in its node's provenance record and forwards no
      // heartbeat of it; the record reaches trainsupd apart
      // (agent_intake.cc: AgentMessage.provenance).
      "RankHeartbeat.provenance",
  };
  return *kNotRead;
}

// The messages an agent sends, and every message of trainsup's reachable
// from them, as proto_convert.cc reads them.
void CollectMessages(const google::protobuf::Descriptor* m,
                     std::vector<const google::protobuf::Descriptor*>* out) {
  for (const google::protobuf::Descriptor* seen : *out) {
    if (seen == m) return;
  }
  out->push_back(m);
  for (int i = 0; i < m->field_count(); ++i) {
    // A map's entries are read as pairs, not by their fields' accessors;
    // a field the agent keeps to itself is not followed.
    if (m->field(i)->is_map() || FieldsNotRead().count(m->name() + "." + m->field(i)->name()) > 0) {
      continue;
    }
    const google::protobuf::Descriptor* sub = m->field(i)->message_type();
    if (sub != nullptr && absl::StartsWith(sub->full_name(), "trainsup.")) CollectMessages(sub, out);
  }
}

// A field added to the wire and forgotten in proto_convert.cc would be
// dropped in silence: every field of what agents send is read there by its
// accessor (`.name()`, `.has_name()`, `.name_size()`), or listed above with
// why not.
TEST(ProtoConvertCompletenessTest, EveryFieldAnAgentSendsIsRead) {
  std::ifstream in(TRAINSUP_SOURCE_DIR "/daemon/proto_convert.cc");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string source = text.str();
  std::vector<const google::protobuf::Descriptor*> messages;
  for (const google::protobuf::Descriptor* m :
       {v1::AgentHello::descriptor(), v1::NodeReport::descriptor(), v1::StacksReport::descriptor(),
        v1::KillCriteria::descriptor(), v1::GpuError::descriptor()}) {
    CollectMessages(m, &messages);
  }
  int checked = 0;
  for (const google::protobuf::Descriptor* m : messages) {
    for (int i = 0; i < m->field_count(); ++i) {
      const std::string name = m->field(i)->name();
      const std::string full = m->name() + "." + name;
      if (FieldsNotRead().count(full) > 0) continue;
      const std::regex accessor("[.>](has_)?" + name + "(_size)?\\(");
      EXPECT_TRUE(std::regex_search(source, accessor)) << full << " is not read in proto_convert.cc";
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

}  // namespace
}  // namespace trainsup
