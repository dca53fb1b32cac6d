// Fuzz target: one datagram from a rank, as the agent's socket hands it to
// DecodeHeartbeat. Whatever the bytes, the decoder returns a heartbeat or a
// reason the supervisor counts, and the size limit decides OVERSIZE alone;
// SplitRecords gives 1 to kMaxRecordsPerDatagram records, each within the
// datagram and after the one before, and each decodes or is refused.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "agent/heartbeat_decoder.h"

namespace {

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "heartbeat_decoder_fuzzer: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view datagram(reinterpret_cast<const char*>(data), size);
  const auto decoded = trainsup::DecodeHeartbeat(datagram);
  const bool oversize = size > trainsup::kMaxHeartbeatDatagramBytes;
  if (const auto* reason = std::get_if<trainsup::v1::RejectReason>(&decoded)) {
    Require(*reason != trainsup::v1::REJECT_REASON_UNSPECIFIED, "a refusal without a reason");
    Require((*reason == trainsup::v1::REJECT_REASON_OVERSIZE) == oversize,
            "OVERSIZE does not follow the size limit");
  } else {
    Require(!oversize, "a datagram over the size limit was decoded");
  }
  const std::vector<absl::string_view> records = trainsup::SplitRecords(datagram);
  Require(!records.empty() && records.size() <= trainsup::kMaxRecordsPerDatagram,
          "no record, or more than a datagram may carry");
  const char* after = datagram.data();
  for (const absl::string_view record : records) {
    Require(record.data() >= after && record.data() + record.size() <= datagram.data() + size,
            "a record outside its datagram, or before the one it follows");
    after = record.data() + record.size();
    const auto each = trainsup::DecodeHeartbeat(record);
    if (const auto* reason = std::get_if<trainsup::v1::RejectReason>(&each)) {
      Require(*reason != trainsup::v1::REJECT_REASON_UNSPECIFIED,
              "a record refused without a reason");
    }
  }
  return 0;
}
