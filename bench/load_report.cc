#include "bench/load_report.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace trainsup {
namespace {

double Percentile(const std::vector<double>& sorted, double q) {
  // Nearest rank: the smallest value with at least q of the values at or below it.
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

int64_t StatusBytes(const std::string& status, const std::string& key) {
  const size_t at = status.find(key);
  if (at == std::string::npos) return -1;
  return std::atoll(status.c_str() + at + key.size()) * 1024;  // the kernel says kB
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
      continue;
    }
    out += c;
  }
  return out;
}

// Sums the samples of one metric family over its labels.
double SumFamily(absl::string_view body, absl::string_view name) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::StartsWith(line, name)) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != ' ' && next != '{') continue;  // another family with this prefix
    const size_t space = line.rfind(' ');
    double v = 0;
    if (space != absl::string_view::npos && absl::SimpleAtod(line.substr(space + 1), &v)) sum += v;
  }
  return sum;
}

}  // namespace

Summary Summarize(std::vector<double> values) {
  Summary s;
  s.n = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.p50 = Percentile(values, 0.50);
  s.p99 = Percentile(values, 0.99);
  s.max = values.back();
  return s;
}

ProcSample ReadProc(pid_t pid) {
  ProcSample sample;
  std::ifstream stat_file(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces), from field 3 on.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return sample;
  std::vector<std::string> fields = absl::StrSplit(stat.substr(paren + 2), ' ');
  if (fields.size() < 13) return sample;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  // utime and stime are fields 14 and 15: indexes 11 and 12 from field 3.
  sample.cpu_seconds = (std::atof(fields[11].c_str()) + std::atof(fields[12].c_str())) / ticks;
  std::ifstream status_file(absl::StrCat("/proc/", pid, "/status"));
  std::string status((std::istreambuf_iterator<char>(status_file)), std::istreambuf_iterator<char>());
  sample.rss_bytes = StatusBytes(status, "VmRSS:");
  sample.hwm_bytes = StatusBytes(status, "VmHWM:");
  sample.ok = sample.rss_bytes >= 0;
  return sample;
}

MetricsScrape ScrapeMetrics(const std::string& host_port, double timeout_s) {
  MetricsScrape scrape;
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    scrape.error = "not HOST:PORT";
    return scrape;
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const std::string port = host_port.substr(colon + 1);
  const auto start = std::chrono::steady_clock::now();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    scrape.error = "cannot resolve " + host_port;
    return scrape;
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_s);
  tv.tv_usec = static_cast<suseconds_t>((timeout_s - static_cast<double>(tv.tv_sec)) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const bool connected = connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  freeaddrinfo(found);
  std::string response;
  if (connected) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: " + host_port + "\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[65536];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, static_cast<size_t>(n));
    }
  }
  close(fd);
  scrape.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const size_t body_at = response.find("\r\n\r\n");
  if (!connected || body_at == std::string::npos || response.rfind("HTTP/1.", 0) != 0 ||
      response.find(" 200 ") > body_at) {
    scrape.error = connected ? "no HTTP 200 answer" : "cannot connect to " + host_port;
    return scrape;
  }
  const absl::string_view body = absl::string_view(response).substr(body_at + 4);
  scrape.ok = true;
  scrape.bytes = body.size();
  scrape.heartbeats_received = SumFamily(body, "trainsup_heartbeats_received_total");
  scrape.heartbeats_rejected = SumFamily(body, "trainsup_heartbeats_rejected_total");
  return scrape;
}

void ReportTable::Row(std::string figure, std::string value, std::string note) {
  rows_.push_back({std::move(figure), std::move(value), std::move(note)});
}

void ReportTable::Json(std::string key, std::string json_value) {
  json_.emplace_back(std::move(key), std::move(json_value));
}

void ReportTable::JsonNumber(const std::string& key, double value) {
  Json(key, std::isfinite(value) ? absl::StrFormat("%.6g", value) : "null");
}

void ReportTable::JsonText(const std::string& key, const std::string& value) {
  Json(key, "\"" + JsonEscape(value) + "\"");
}

std::string ReportTable::Markdown(const std::string& title) const {
  std::ostringstream out;
  out << "### " << title << "\n\n| figure | value | definition |\n|---|---|---|\n";
  for (const Line& l : rows_) out << "| " << l.figure << " | " << l.value << " | " << l.note << " |\n";
  return out.str();
}

std::string ReportTable::ToJson() const {
  std::string out = "{";
  for (size_t i = 0; i < json_.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "\n  \"" : ",\n  \"", JsonEscape(json_[i].first), "\": ",
                    json_[i].second);
  }
  return out + "\n}\n";
}

std::string FormatSeconds(double seconds) {
  if (!std::isfinite(seconds)) return "n/a";
  if (seconds < 1.0) return absl::StrFormat("%.1f ms", seconds * 1e3);
  return absl::StrFormat("%.2f s", seconds);
}

std::string FormatBytes(double bytes) {
  if (bytes >= 1024.0 * 1024.0) return absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024.0));
  if (bytes >= 1024.0) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  return absl::StrFormat("%.0f B", bytes);
}

}  // namespace trainsup
