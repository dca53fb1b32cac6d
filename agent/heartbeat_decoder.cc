#include "agent/heartbeat_decoder.h"

#include <string>

#include "google/protobuf/util/json_util.h"

namespace trainsup {

std::variant<v1::RankHeartbeat, RejectReason> DecodeHeartbeat(absl::string_view datagram) {
  if (datagram.size() > kMaxHeartbeatDatagramBytes) return RejectReason::kOversize;
  const std::string text(datagram);
  v1::RankHeartbeat hb;
  google::protobuf::util::JsonParseOptions strict;
  strict.ignore_unknown_fields = false;
  if (google::protobuf::util::JsonStringToMessage(text, &hb, strict).ok()) return hb;
  // Tell "unknown field" from "not JSON of RankHeartbeat": only the former
  // parses once unknown fields are allowed. This second parse runs on the
  // error path only.
  google::protobuf::util::JsonParseOptions lenient;
  lenient.ignore_unknown_fields = true;
  v1::RankHeartbeat probe;
  if (google::protobuf::util::JsonStringToMessage(text, &probe, lenient).ok()) {
    return RejectReason::kUnknownField;
  }
  return RejectReason::kInvalidJson;
}

}  // namespace trainsup
