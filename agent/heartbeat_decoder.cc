#include "agent/heartbeat_decoder.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace trainsup {

namespace {

// True when the JSON object names a field RankHeartbeat does not have (by its
// proto name or its lowerCamelCase JSON name).
bool HasUnknownField(const google::protobuf::Struct& object) {
  const google::protobuf::Descriptor* descriptor = v1::RankHeartbeat::descriptor();
  for (const auto& [key, value] : object.fields()) {
    if (descriptor->FindFieldByName(key) == nullptr &&
        descriptor->FindFieldByCamelcaseName(key) == nullptr) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::variant<v1::RankHeartbeat, v1::RejectReason> DecodeHeartbeat(absl::string_view datagram) {
  if (datagram.size() > kMaxHeartbeatDatagramBytes) return v1::REJECT_REASON_OVERSIZE;
  const std::string text(datagram);
  v1::RankHeartbeat hb;
  google::protobuf::util::JsonParseOptions strict;
  strict.ignore_unknown_fields = false;
  if (google::protobuf::util::JsonStringToMessage(text, &hb, strict).ok()) return hb;
  // The error path only: tell a field the schema does not have from a value
  // it cannot take (a wrong type, an unknown enum name, not JSON at all) by
  // reading the datagram as a generic JSON object.
  google::protobuf::Struct object;
  if (google::protobuf::util::JsonStringToMessage(text, &object).ok() && HasUnknownField(object)) {
    return v1::REJECT_REASON_UNKNOWN_FIELD;
  }
  return v1::REJECT_REASON_INVALID_JSON;
}

std::vector<absl::string_view> SplitRecords(absl::string_view datagram) {
  std::vector<absl::string_view> records;
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  size_t begin = 0;
  for (size_t i = 0; i < datagram.size(); ++i) {
    const char c = datagram[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0 &&
               records.size() + 1 < kMaxRecordsPerDatagram) {
      records.push_back(absl::StripLeadingAsciiWhitespace(datagram.substr(begin, i + 1 - begin)));
      begin = i + 1;
    }
  }
  const absl::string_view rest = datagram.substr(begin);
  if (records.empty() || !absl::StripAsciiWhitespace(rest).empty()) {
    records.push_back(records.empty() ? rest : absl::StripLeadingAsciiWhitespace(rest));
  }
  return records;
}

int HighestHeartbeatField() {
  const google::protobuf::Descriptor* descriptor = v1::RankHeartbeat::descriptor();
  int highest = 0;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    highest = std::max(highest, descriptor->field(i)->number());
  }
  return highest;
}

}  // namespace trainsup
