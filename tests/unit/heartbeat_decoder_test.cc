#include "agent/heartbeat_decoder.h"

#include <cmath>
#include <ostream>
#include <string>
#include <variant>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainsup/v1/agent.pb.h"
#include "trainsup/v1/heartbeat.pb.h"

namespace trainsup {
namespace v1 {

// Lets GoogleTest print a reason by its name in failure messages.
inline void PrintTo(RejectReason reason, std::ostream* os) { *os << RejectReason_Name(reason); }

}  // namespace v1
namespace {

using ::testing::ElementsAre;

// Every field of RankHeartbeat, with Protobuf's JSON mapping and proto field names.
constexpr char kFullHeartbeat[] = R"json({
  "kind": "HEARTBEAT_KIND_STEP",
  "job": "llama-7b.run_3",
  "rank": 5,
  "local_rank": 1,
  "world_size": 16,
  "pid": 31337,
  "step": "1200",
  "step_duration_seconds": 0.75,
  "data_wait_seconds": 0.0625,
  "compute_seconds": 0.5,
  "loss": 2.125,
  "learning_rate": 0.0003,
  "grad_norm": 1.5,
  "samples": "64",
  "device_memory_bytes": "17179869184",
  "checkpoint_blocking_seconds": 1.25,
  "checkpoint_async_seconds": 3.5,
  "exception_type": "RuntimeError",
  "exception_message": "NCCL timeout",
  "generation": "4",
  "restart_count": 2
})json";

// Returns the decoded heartbeat, or fails the test with the reject reason.
v1::RankHeartbeat MustDecode(const std::string& datagram) {
  std::variant<v1::RankHeartbeat, v1::RejectReason> result = DecodeHeartbeat(datagram);
  if (const v1::RejectReason* reason = std::get_if<v1::RejectReason>(&result)) {
    ADD_FAILURE() << "rejected: " << v1::RejectReason_Name(*reason) << "\n" << datagram;
    return v1::RankHeartbeat();
  }
  return std::get<v1::RankHeartbeat>(result);
}

// The reject reason, or a sentinel when the datagram decoded.
v1::RejectReason ReasonOf(const std::string& datagram) {
  std::variant<v1::RankHeartbeat, v1::RejectReason> result = DecodeHeartbeat(datagram);
  if (const v1::RejectReason* reason = std::get_if<v1::RejectReason>(&result)) return *reason;
  ADD_FAILURE() << "decoded, expected a reject: " << datagram;
  return v1::REJECT_REASON_UNSPECIFIED;
}

TEST(DecodeHeartbeatTest, DecodesEveryField) {
  v1::RankHeartbeat hb = MustDecode(kFullHeartbeat);

  EXPECT_EQ(hb.kind(), v1::HEARTBEAT_KIND_STEP);
  EXPECT_EQ(hb.job(), "llama-7b.run_3");
  EXPECT_EQ(hb.rank(), 5u);
  EXPECT_EQ(hb.local_rank(), 1u);
  EXPECT_EQ(hb.world_size(), 16u);
  EXPECT_EQ(hb.pid(), 31337u);
  EXPECT_EQ(hb.step(), 1200);
  EXPECT_EQ(hb.step_duration_seconds(), 0.75);
  EXPECT_EQ(hb.data_wait_seconds(), 0.0625);
  ASSERT_TRUE(hb.has_compute_seconds());
  EXPECT_EQ(hb.compute_seconds(), 0.5);
  ASSERT_TRUE(hb.has_loss());
  EXPECT_EQ(hb.loss(), 2.125);
  ASSERT_TRUE(hb.has_learning_rate());
  EXPECT_DOUBLE_EQ(hb.learning_rate(), 0.0003);
  ASSERT_TRUE(hb.has_grad_norm());
  EXPECT_EQ(hb.grad_norm(), 1.5);
  ASSERT_TRUE(hb.has_samples());
  EXPECT_EQ(hb.samples(), 64u);
  ASSERT_TRUE(hb.has_device_memory_bytes());
  EXPECT_EQ(hb.device_memory_bytes(), 17179869184u);
  EXPECT_EQ(hb.checkpoint_blocking_seconds(), 1.25);
  EXPECT_EQ(hb.checkpoint_async_seconds(), 3.5);
  EXPECT_EQ(hb.exception_type(), "RuntimeError");
  EXPECT_EQ(hb.exception_message(), "NCCL timeout");
  EXPECT_EQ(hb.generation(), 4u);
  EXPECT_EQ(hb.restart_count(), 2u);
}

TEST(DecodeHeartbeatTest, AbsentOptionalFieldsStayAbsent) {
  v1::RankHeartbeat hb = MustDecode(
      R"({"kind": "HEARTBEAT_KIND_COMPUTE_BEGIN", "job": "j", "rank": 0, "world_size": 1})");

  EXPECT_EQ(hb.kind(), v1::HEARTBEAT_KIND_COMPUTE_BEGIN);
  EXPECT_FALSE(hb.has_compute_seconds());
  EXPECT_FALSE(hb.has_loss());
  EXPECT_FALSE(hb.has_samples());
  EXPECT_EQ(hb.step(), 0);
}

TEST(DecodeHeartbeatTest, AcceptsLowerCamelCaseNames) {
  v1::RankHeartbeat hb = MustDecode(R"({
    "kind": "HEARTBEAT_KIND_STEP", "job": "j", "localRank": 3, "worldSize": 8,
    "stepDurationSeconds": 0.25, "dataWaitSeconds": 0.125, "computeSeconds": 0.5,
    "learningRate": 0.5, "gradNorm": 2, "deviceMemoryBytes": 1024,
    "checkpointBlockingSeconds": 4, "checkpointAsyncSeconds": 8,
    "exceptionType": "E", "exceptionMessage": "m", "restartCount": 1
  })");

  EXPECT_EQ(hb.local_rank(), 3u);
  EXPECT_EQ(hb.world_size(), 8u);
  EXPECT_EQ(hb.step_duration_seconds(), 0.25);
  EXPECT_EQ(hb.data_wait_seconds(), 0.125);
  EXPECT_EQ(hb.compute_seconds(), 0.5);
  EXPECT_EQ(hb.learning_rate(), 0.5);
  EXPECT_EQ(hb.grad_norm(), 2.0);
  EXPECT_EQ(hb.device_memory_bytes(), 1024u);
  EXPECT_EQ(hb.checkpoint_blocking_seconds(), 4.0);
  EXPECT_EQ(hb.checkpoint_async_seconds(), 8.0);
  EXPECT_EQ(hb.exception_type(), "E");
  EXPECT_EQ(hb.exception_message(), "m");
  EXPECT_EQ(hb.restart_count(), 1u);
}

TEST(DecodeHeartbeatTest, NaNStringLossDecodesToNaN) {
  v1::RankHeartbeat hb =
      MustDecode(R"({"kind": "HEARTBEAT_KIND_STEP", "job": "j", "world_size": 1, "loss": "NaN"})");

  ASSERT_TRUE(hb.has_loss());
  EXPECT_TRUE(std::isnan(hb.loss()));
}

TEST(DecodeHeartbeatTest, DecodesTheTrainingSignals) {
  v1::RankHeartbeat hb = MustDecode(R"({
    "kind": "HEARTBEAT_KIND_STEP", "job": "j", "world_size": 8, "host_rss_bytes": 6442450944,
    "tokens": 8192, "replica_digest": "18446744073709551615", "replica_group": 3,
    "device_memory_capacity_bytes": "85899345920", "grad_norm": "Infinity"
  })");
  EXPECT_EQ(hb.host_rss_bytes(), 6442450944u);
  EXPECT_EQ(hb.tokens(), 8192u);
  EXPECT_EQ(hb.replica_digest(), 18446744073709551615u);  // every bit, as a string
  EXPECT_EQ(hb.replica_group(), 3u);
  EXPECT_EQ(hb.device_memory_capacity_bytes(), 85899345920u);
  EXPECT_TRUE(std::isinf(hb.grad_norm()));

  hb = MustDecode(R"({"kind": "HEARTBEAT_KIND_START", "job": "j", "world_size": 8,
                      "signal_settings": {"loss_flat": 0, "throughput_confirm": 50}})");
  ASSERT_EQ(hb.signal_settings().size(), 2u);
  EXPECT_EQ(hb.signal_settings().at("loss_flat"), 0);
  EXPECT_EQ(hb.signal_settings().at("throughput_confirm"), 50);
}

TEST(DecodeHeartbeatTest, TheAgentTellsItsRanksTheHighestFieldItDecodes) {
  EXPECT_GE(HighestHeartbeatField(), 45);  // signal_settings: the highest the helper sends
}

TEST(DecodeHeartbeatTest, UnknownFieldIsUnknownField) {
  EXPECT_EQ(ReasonOf(R"({"kind": "HEARTBEAT_KIND_STEP", "job": "j", "epoch": 3})"),
            v1::REJECT_REASON_UNKNOWN_FIELD);
  EXPECT_EQ(ReasonOf(R"({"step_duration": 0.5})"), v1::REJECT_REASON_UNKNOWN_FIELD);
}

TEST(DecodeHeartbeatTest, NotJsonIsInvalidJson) {
  EXPECT_EQ(ReasonOf("hello"), v1::REJECT_REASON_INVALID_JSON);
  EXPECT_EQ(ReasonOf(R"({"kind": "HEARTBEAT_KIND_STEP", "job": )"), v1::REJECT_REASON_INVALID_JSON);
  EXPECT_EQ(ReasonOf(""), v1::REJECT_REASON_INVALID_JSON);
}

TEST(DecodeHeartbeatTest, JsonArrayIsInvalidJson) {
  EXPECT_EQ(ReasonOf(R"([{"kind": "HEARTBEAT_KIND_STEP"}])"), v1::REJECT_REASON_INVALID_JSON);
}

TEST(DecodeHeartbeatTest, WrongTypeForAFieldIsInvalidJson) {
  EXPECT_EQ(ReasonOf(R"({"rank": "zero"})"), v1::REJECT_REASON_INVALID_JSON);
  EXPECT_EQ(ReasonOf(R"({"job": 5})"), v1::REJECT_REASON_INVALID_JSON);
  EXPECT_EQ(ReasonOf(R"({"step_duration_seconds": {"s": 1}})"), v1::REJECT_REASON_INVALID_JSON);
  EXPECT_EQ(ReasonOf(R"({"rank": -1})"), v1::REJECT_REASON_INVALID_JSON);
}

TEST(DecodeHeartbeatTest, NumericKindIsLeftToTheSupervisor) {
  // Proto3 enums are open: an unknown number decodes; CheckHeartbeat refuses it.
  v1::RankHeartbeat hb = MustDecode(R"({"kind": 99, "job": "j"})");
  EXPECT_EQ(static_cast<int>(hb.kind()), 99);
}

// A known field with a misspelled enum name, e.g. {"kind": "HEARTBEAT_KIND_BOGUS"}
// or {"kind": "STEP"}, names no unknown field: its value is wrong, so it is
// invalid_json. (Protobuf's ignore_unknown_fields also ignores unknown enum
// values, which must not make it unknown_field.)
TEST(DecodeHeartbeatTest, UnknownEnumNameIsInvalidJsonNotUnknownField) {
  EXPECT_EQ(ReasonOf(R"({"kind": "HEARTBEAT_KIND_BOGUS", "job": "j"})"),
            v1::REJECT_REASON_INVALID_JSON);
  EXPECT_EQ(ReasonOf(R"({"kind": "STEP", "job": "j"})"), v1::REJECT_REASON_INVALID_JSON);
}

TEST(DecodeHeartbeatTest, UnknownFieldIsReportedBeforeAWrongValue) {
  // Both faults at once: the unknown field is the more telling one (a helper
  // newer than its agent), so it is the reason given.
  EXPECT_EQ(ReasonOf(R"({"rank": "zero", "epoch": 3})"), v1::REJECT_REASON_UNKNOWN_FIELD);
  EXPECT_EQ(ReasonOf(R"({"rank": "zero"})"), v1::REJECT_REASON_INVALID_JSON);
}

TEST(DecodeHeartbeatTest, OneByteOverTheLimitIsOversize) {
  std::string datagram = R"({"kind": "HEARTBEAT_KIND_STEP", "job": "j"})";
  datagram.append(kMaxHeartbeatDatagramBytes + 1 - datagram.size(), ' ');
  ASSERT_EQ(datagram.size(), kMaxHeartbeatDatagramBytes + 1);

  EXPECT_EQ(ReasonOf(datagram), v1::REJECT_REASON_OVERSIZE);
}

TEST(DecodeHeartbeatTest, ExactlyTheLimitDecodes) {
  std::string datagram = R"({"kind": "HEARTBEAT_KIND_STEP", "job": "j", "rank": 2})";
  datagram.append(kMaxHeartbeatDatagramBytes - datagram.size(), ' ');
  ASSERT_EQ(datagram.size(), kMaxHeartbeatDatagramBytes);

  v1::RankHeartbeat hb = MustDecode(datagram);
  EXPECT_EQ(hb.job(), "j");
  EXPECT_EQ(hb.rank(), 2u);
}

TEST(DecodeHeartbeatTest, ExceptionMessageOfOneKibibyteFitsTheLimit) {
  std::string datagram =
      R"({"kind": "HEARTBEAT_KIND_EXCEPTION", "job": "j", "rank": 0, "world_size": 2,
          "exception_type": "RuntimeError", "exception_message": ")" +
      std::string(1024, 'x') + R"("})";
  ASSERT_LE(datagram.size(), kMaxHeartbeatDatagramBytes);

  v1::RankHeartbeat hb = MustDecode(datagram);
  EXPECT_EQ(hb.exception_message().size(), 1024u);
}

TEST(SplitRecordsTest, OneObjectIsOneRecord) {
  EXPECT_THAT(SplitRecords(R"({"kind":"HEARTBEAT_KIND_STEP","step":3})"),
              ElementsAre(R"({"kind":"HEARTBEAT_KIND_STEP","step":3})"));
  // Over several lines, as a person might send it: still one.
  EXPECT_THAT(SplitRecords("{\n  \"rank\": 2,\n  \"job\": \"j\"\n}\n"),
              ElementsAre("{\n  \"rank\": 2,\n  \"job\": \"j\"\n}"));
}

TEST(SplitRecordsTest, ObjectsOneAfterAnotherAreRecordsInTheirOrder) {
  EXPECT_THAT(SplitRecords("{\"step\":1,\"kind\":\"HEARTBEAT_KIND_STEP\"}\n"
                           "{\"step\":2,\"kind\":\"HEARTBEAT_KIND_COMPUTE_BEGIN\"}"),
              ElementsAre(R"({"step":1,"kind":"HEARTBEAT_KIND_STEP"})",
                          R"({"step":2,"kind":"HEARTBEAT_KIND_COMPUTE_BEGIN"})"));
  // Nested objects and braces inside strings do not end a record.
  EXPECT_THAT(SplitRecords(R"({"a":{"b":"}{\"}"}}{"c":"]"})"),
              ElementsAre(R"({"a":{"b":"}{\"}"}})", R"({"c":"]"})"));
}

TEST(SplitRecordsTest, WhatIsNotJsonComesBackWholeForTheDecoderToRefuse) {
  EXPECT_THAT(SplitRecords("hello"), ElementsAre("hello"));
  EXPECT_THAT(SplitRecords(""), ElementsAre(""));
  EXPECT_THAT(SplitRecords("}}{"), ElementsAre("}}{"));
  // A record, then something else: the something else is a record of its own.
  const std::vector<absl::string_view> two = SplitRecords(R"({"rank":1} junk)");
  ASSERT_THAT(two, ElementsAre(R"({"rank":1})", "junk"));
  EXPECT_EQ(ReasonOf(std::string(two[1])), v1::REJECT_REASON_INVALID_JSON);
}

TEST(SplitRecordsTest, AtMostTheLimitTheLastHoldingTheRest) {
  std::string datagram;
  for (int i = 0; i < kMaxRecordsPerDatagram + 2; ++i) datagram += R"({"rank":1})";
  const std::vector<absl::string_view> records = SplitRecords(datagram);
  ASSERT_EQ(records.size(), static_cast<size_t>(kMaxRecordsPerDatagram));
  EXPECT_EQ(records.front(), R"({"rank":1})");
  EXPECT_EQ(records.back(), R"({"rank":1}{"rank":1}{"rank":1})");
  EXPECT_EQ(ReasonOf(std::string(records.back())), v1::REJECT_REASON_INVALID_JSON);
}

TEST(SplitRecordsTest, EachRecordOfACombinedDatagramDecodes) {
  const std::vector<absl::string_view> records = SplitRecords(
      "{\"kind\":\"HEARTBEAT_KIND_STEP\",\"rank\":1,\"step\":\"7\",\"loss\":\"NaN\"}\n"
      "{\"kind\":\"HEARTBEAT_KIND_COMPUTE_BEGIN\",\"rank\":1,\"step\":8}");
  ASSERT_EQ(records.size(), 2u);
  const v1::RankHeartbeat step = MustDecode(std::string(records[0]));
  const v1::RankHeartbeat begin = MustDecode(std::string(records[1]));
  EXPECT_EQ(step.kind(), v1::HEARTBEAT_KIND_STEP);
  EXPECT_EQ(step.step(), 7u);
  EXPECT_TRUE(std::isnan(step.loss()));
  EXPECT_EQ(begin.kind(), v1::HEARTBEAT_KIND_COMPUTE_BEGIN);
  EXPECT_EQ(begin.step(), 8u);
}

}  // namespace
}  // namespace trainsup
