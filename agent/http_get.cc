#include "agent/http_get.h"

#include <curl/curl.h>

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trainsup {
namespace {

struct Body {
  std::string text;
  size_t max_bytes = 0;
  bool too_long = false;
};

// libcurl's write callback: a size other than the one given stops the
// transfer (CURLE_WRITE_ERROR), which is how a body past its bound is cut.
size_t Append(char* data, size_t size, size_t count, void* user) {
  Body* body = static_cast<Body*>(user);
  const size_t n = size * count;
  if (body->text.size() + n > body->max_bytes) {
    body->too_long = true;
    return 0;
  }
  body->text.append(data, n);
  return n;
}

struct CurlDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& url, const HttpGetOptions& options) {
  if (!absl::StartsWithIgnoreCase(url, "http://") && !absl::StartsWithIgnoreCase(url, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat("not an http:// or https:// URL: ", url));
  }
  // curl_global_init is not thread-safe; curl_easy_init calls it once if
  // the program did not, which is safe while one thread uses libcurl (the
  // agent's health poller is that thread).
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (curl == nullptr) return absl::InternalError("libcurl could not start a transfer");
  Body body;
  body.max_bytes = options.max_bytes;
  char error[CURL_ERROR_SIZE] = {};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM: the agent owns its signals
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options.timeout)));
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(options.max_bytes));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  const CURLcode code = curl_easy_perform(c);
  if (body.too_long || code == CURLE_FILESIZE_EXCEEDED) {
    return absl::ResourceExhaustedError(
        absl::StrCat(url, " answered with more than ", options.max_bytes, " bytes"));
  }
  if (code != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat(url, ": ", error[0] != '\0' ? error : curl_easy_strerror(code)));
  }
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) {
    return absl::FailedPreconditionError(absl::StrCat(url, " answered HTTP ", status));
  }
  return std::move(body.text);
}

}  // namespace trainsup
