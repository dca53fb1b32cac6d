#ifndef TRAINSUP_CLI_RENDER_H_
#define TRAINSUP_CLI_RENDER_H_

#include <string>

#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "trainsup/v1/operator.pb.h"

namespace trainsup {

// The JSON of `-o json`: Protobuf's JSON mapping with the proto field names
// and zero values printed, so that scripts never need to know the defaults.
std::string RenderJson(const google::protobuf::Message& message);

// The tables of `-o table`. `now` renders ages; times are shown as ages.
std::string RenderJobsTable(const v1::ListJobsResponse& response, absl::Time now);
enum class RankSort { kRank, kP99 };
std::string RenderRanksTable(const v1::ListRanksResponse& response, RankSort sort);
std::string RenderNodesTable(const v1::ListNodesResponse& response);
std::string RenderEventsTable(const v1::ListEventsResponse& response);
// One event as a line: "TIME KIND JOB [rank R] [node N]: message".
std::string RenderEventLine(const v1::Event& event);
// One event as one line of JSON (for `events --follow -o json`).
std::string RenderJsonLine(const google::protobuf::Message& message);

// "1.23s", "45ms", "250s"; "-" for unknown (negative) values and NaN.
std::string FormatSeconds(double seconds);
// "1.23s ago"; "-" for unknown (negative) ages.
std::string FormatAge(double seconds);

}  // namespace trainsup

#endif  // TRAINSUP_CLI_RENDER_H_
