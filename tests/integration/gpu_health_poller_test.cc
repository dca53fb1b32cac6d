// The agent's GPU health sources on real processes and a real socket
// (agent/gpu_health_poller.h, agent/http_get.h): a stand-in nvidia-smi that
// prints a recorded `nvidia-smi -q` (tests/e2e/nvidia_smi_recorded.sh), and
// an HTTP server on loopback playing dcgm-exporter: its recorded /metrics,
// and the exporters that misbehave (HTML, a 404, one that never answers, one
// that sends 100 MB): each is counted and refused, never a crash, and the
// other source still reads.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/dcgm_metrics.h"
#include "agent/gpu_health_poller.h"
#include "agent/http_get.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

std::string Recorded(const std::string& name) {
  std::ifstream in(std::string(TRAINSUP_SOURCE_DIR) + "/tests/testdata/gpu/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// An HTTP/1.0 server on a loopback port, one connection at a time, that
// answers every request the same way until it is destroyed.
class FakeExporter {
 public:
  enum class Mode { kMetrics, kHtml, kNotFound, kSilent, kEndless };

  explicit FakeExporter(Mode mode) : mode_(mode) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(listen(fd_, 8), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeExporter() {
    stopping_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }

  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_, "/metrics"); }
  size_t bytes_sent() const { return sent_; }

 private:
  void Serve() {
    while (!stopping_) {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char request[4096];
      (void)!read(c, request, sizeof(request));
      Answer(c);
      close(c);
    }
  }

  void Send(int c, const std::string& text) {
    const ssize_t n = write(c, text.data(), text.size());
    if (n > 0) sent_ += n;
  }

  void Answer(int c) {
    switch (mode_) {
      case Mode::kMetrics: {
        const std::string body = Recorded("dcgm_exporter.txt");
        Send(c, absl::StrCat("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ",
                             body.size(), "\r\n\r\n", body));
        return;
      }
      case Mode::kHtml:
        Send(c, "HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n"
                "<html><body><h1>Welcome to nginx!</h1></body></html>\n");
        return;
      case Mode::kNotFound:
        Send(c, "HTTP/1.0 404 Not Found\r\n\r\n404 page not found\n");
        return;
      case Mode::kSilent: {
        // Holds the connection and says nothing until the client gives up.
        char byte;
        (void)!read(c, &byte, 1);
        return;
      }
      case Mode::kEndless: {
        // A 100 MB answer, sent until the client hangs up.
        Send(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 104857600\r\n\r\n");
        const std::string chunk(64 * 1024, '#');
        for (size_t total = 0; total < (100u << 20) && !stopping_; total += chunk.size()) {
          if (send(c, chunk.data(), chunk.size(), MSG_NOSIGNAL) <= 0) return;
          sent_ += chunk.size();
        }
        return;
      }
    }
  }

  const Mode mode_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> sent_{0};
};

TEST(HttpGetTest, AnExportersRecordedMetricsAreReadWhole) {
  FakeExporter exporter(FakeExporter::Mode::kMetrics);
  absl::StatusOr<std::string> body = HttpGet(exporter.url(), HttpGetOptions());
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, Recorded("dcgm_exporter.txt"));
}

TEST(HttpGetTest, ANotFoundIsRefusedWithItsStatus) {
  FakeExporter exporter(FakeExporter::Mode::kNotFound);
  absl::StatusOr<std::string> body = HttpGet(exporter.url(), HttpGetOptions());
  EXPECT_EQ(body.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(body.status().message()), ::testing::HasSubstr("HTTP 404"));
}

TEST(HttpGetTest, AnExporterThatNeverAnswersIsGivenUpAtTheDeadline) {
  FakeExporter exporter(FakeExporter::Mode::kSilent);
  HttpGetOptions options;
  options.timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> body = HttpGet(exporter.url(), options);
  EXPECT_EQ(body.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // the deadline, not the server, ended it
}

TEST(HttpGetTest, AHundredMegabyteAnswerIsCutAtItsBound) {
  FakeExporter exporter(FakeExporter::Mode::kEndless);
  HttpGetOptions options;
  options.max_bytes = 1 << 20;
  absl::StatusOr<std::string> body = HttpGet(exporter.url(), options);
  EXPECT_EQ(body.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(HttpGetTest, OnlyHttpIsSpoken) {
  EXPECT_EQ(HttpGet("file:///etc/passwd", HttpGetOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The stand-in nvidia-smi, answering -q with `recording`.
GpuHealthPollerOptions StandIn(const std::string& recording) {
  setenv("TRAINSUP_TEST_NVIDIA_SMI_Q", recording.c_str(), 1);
  GpuHealthPollerOptions options;
  options.nvidia_smi = std::string(TRAINSUP_SOURCE_DIR) + "/tests/e2e/nvidia_smi_recorded.sh";
  options.interval = absl::Milliseconds(100);
  return options;
}

// The poller's first reading, waited for up to 30 s.
std::optional<GpuHealthReading> FirstReading(GpuHealthPoller& poller) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    if (std::optional<GpuHealthReading> r = poller.TakeChanged()) return r;
    absl::SleepFor(absl::Milliseconds(20));  // polling a condition, with a deadline
  }
  return std::nullopt;
}

TEST(GpuHealthPollerTest, NvidiaSmiAndTheExporterMakeOneReading) {
  FakeExporter exporter(FakeExporter::Mode::kMetrics);
  GpuHealthPollerOptions options =
      StandIn("throttling/nvidia_smi_q_h100_power_cap_power_brake_sw_thermal.txt");
  options.dcgm_url = exporter.url();
  GpuHealthPoller poller(options);
  poller.Start();

  std::optional<GpuHealthReading> reading = FirstReading(poller);

  ASSERT_TRUE(reading.has_value());
  EXPECT_EQ(reading->source, "nvidia-smi+dcgm-exporter");
  // Eight H100s from nvidia-smi; the recorded exporter's GPUs are other
  // machines' (other UUIDs), kept beside them.
  absl::StatusOr<DcgmScrape> exported = ParseDcgmExposition(Recorded("dcgm_exporter.txt"));
  ASSERT_TRUE(exported.ok());
  ASSERT_EQ(reading->gpus.size(), 8 + exported->gpus.size());
  EXPECT_EQ(SlowingReasonsText(*reading->gpus[2].clock_event_reasons & kClockSlowingReasons),
            "software thermal slowdown, power brake slowdown, power cap");
  EXPECT_EQ(reading->gpus[8].uuid, "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e");
  EXPECT_EQ(reading->gpus[8].temperature_c, 25);
  // Nothing changed since: the next rounds send nothing.
  EXPECT_FALSE(poller.TakeChanged().has_value());
  EXPECT_EQ(poller.nvidia_smi_failures(), 0);
  EXPECT_EQ(poller.dcgm_failures(), 0);
}

TEST(GpuHealthPollerTest, AnExporterThatAnswersWithHtmlIsCountedAndNvidiaSmiStillReads) {
  FakeExporter exporter(FakeExporter::Mode::kHtml);
  GpuHealthPollerOptions options =
      StandIn("throttling/nvidia_smi_q_h100_hw_slowdown_power_brake.txt");
  options.dcgm_url = exporter.url();
  GpuHealthPoller poller(options);
  poller.Start();

  std::optional<GpuHealthReading> reading = FirstReading(poller);

  ASSERT_TRUE(reading.has_value());
  EXPECT_EQ(reading->source, "nvidia-smi");
  EXPECT_EQ(reading->gpus.size(), 8u);
  EXPECT_GE(poller.dcgm_failures(), 1);
}

TEST(GpuHealthPollerTest, ANodeWithoutNvidiaSmiReadsNothingAndStopsAsking) {
  GpuHealthPollerOptions options;
  options.nvidia_smi = "trainsup-no-such-nvidia-smi";
  options.interval = absl::Milliseconds(10);
  GpuHealthPoller poller(options);
  poller.Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (poller.nvidia_smi_failures() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(poller.nvidia_smi_failures(), 1);
  absl::SleepFor(absl::Milliseconds(200));  // twenty rounds' time: none of them spawns again
  EXPECT_EQ(poller.nvidia_smi_failures(), 1);
  EXPECT_FALSE(poller.TakeChanged().has_value());
}

}  // namespace
}  // namespace trainsup
