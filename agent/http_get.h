#ifndef TRAINSUP_AGENT_HTTP_GET_H_
#define TRAINSUP_AGENT_HTTP_GET_H_

// One bounded HTTP GET (libcurl): what the agent reads dcgm-exporter's
// /metrics with. A scrape must never hold the agent up nor fill its memory:
// the whole exchange has a deadline, and a body past its bound is cut off
// and refused, not read to the end.

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainsup {

struct HttpGetOptions {
  absl::Duration timeout = absl::Seconds(2);  // connect and transfer, together
  size_t max_bytes = 4 << 20;
};

// The body of a 200 answer to GET `url` (http:// or https://). Unavailable
// for what did not answer in time or could not connect, FailedPrecondition
// for another status, ResourceExhausted for a body past max_bytes,
// InvalidArgument for a URL of another scheme.
absl::StatusOr<std::string> HttpGet(const std::string& url, const HttpGetOptions& options);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_HTTP_GET_H_
