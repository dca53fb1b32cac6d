// The real trainsupd binary out of descriptors (docs/limits.md "Descriptors"):
// started with a hard limit of 256, it logs how many agent streams it can
// hold and lowers a larger --max-agents to that; the next agent stream is
// refused with RESOURCE_EXHAUSTED naming --max-agents. Then a flood of silent
// TCP connections takes it past its limit (gRPC 1.51 stops accepting), the
// clients leave, and `trainsupctl jobs` must answer: the listener was
// rebuilt, and /metrics counts it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/wait.h"
#include "trainsup/v1/agent.grpc.pb.h"

namespace trainsup {
namespace {

using Clock = std::chrono::steady_clock;
using testing::WaitFor;

constexpr int kDescriptorLimit = 256;

// A TCP connection to 127.0.0.1:port that completes its handshake and sends
// nothing; -1 when it cannot be made.
int SilentConnection(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// GET http://127.0.0.1:port/metrics; empty on failure.
std::string Scrape(int port) {
  int fd = SilentConnection(port);
  if (fd < 0) return "";
  timeval tv{3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string body;
  char buffer[65536];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) body.append(buffer, n);
  close(fd);
  return body;
}

// The value of an unlabelled sample in an exposition; -1 when absent.
double Sample(const std::string& exposition, const std::string& name) {
  std::smatch match;
  if (!std::regex_search(exposition, match, std::regex("\n" + name + " ([0-9.e+]+)"))) return -1;
  return std::stod(match[1]);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs argv with stdout and stderr to `log` and, if `nofile` > 0, that
// descriptor limit (soft and hard); returns its pid.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log, int nofile = 0) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  if (nofile > 0) {
    rlimit rl{static_cast<rlim_t>(nofile), static_cast<rlim_t>(nofile)};
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  execv(args[0], args.data());
  _exit(127);
}

// `trainsupctl jobs` against the supervisor; its exit status (-1: no exit
// within its own deadline and a margin).
int Jobs(const std::string& address, const std::string& log, const std::string& timeout) {
  const pid_t pid = Spawn({TRAINSUPCTL_BINARY, "--supervisor", address, "--timeout", timeout,
                           "jobs"}, log);
  int status = 0;
  const bool exited = WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; },
                              std::chrono::seconds(30));
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// An agent played over its own connection: hello, and the welcome read.
struct FloodAgent {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::AgentService::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::SupervisorMessage>> stream;

  FloodAgent(const std::string& address, int index) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    stub = v1::AgentService::NewStub(channel);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stream = stub->Connect(&context);
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node(absl::StrCat("flood-", index));
    hello.mutable_hello()->set_job("flood");
    hello.mutable_hello()->set_incarnation(1);
    hello.mutable_hello()->set_generation(1);
    stream->Write(hello);
  }
  // True once the supervisor welcomed it; false when the stream ended.
  bool Welcomed() {
    v1::SupervisorMessage message;
    while (stream->Read(&message)) {
      if (message.has_welcome()) return true;
    }
    return false;
  }
  grpc::Status Finish() {
    finished = true;
    return stream->Finish();
  }
  ~FloodAgent() {
    context.TryCancel();
    if (!finished) stream->Finish();
  }
  bool finished = false;
};

class ListenerExhaustionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // This process holds the flood's ends: more descriptors than trainsupd.
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    std::string tmpl = ::testing::TempDir() + "/listener_exhaustion_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    log_ = dir_ + "/trainsupd.log";
    pid_ = Spawn({TRAINSUPD_BINARY, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                  "--max-agents=100000"}, log_, kDescriptorLimit);
    std::smatch match;
    const std::regex listening(
        "listening grpc=127\\.0\\.0\\.1:(\\d+) metrics=127\\.0\\.0\\.1:(\\d+)");
    ASSERT_TRUE(WaitFor([&] {
      log_text_ = ReadFile(log_);
      return std::regex_search(log_text_, match, listening);
    }, std::chrono::seconds(20))) << log_text_;
    port_ = std::stoi(match[1]);
    address_ = absl::StrCat("127.0.0.1:", port_);
    metrics_port_ = std::stoi(match[2]);
  }

  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      if (!WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; },
                   std::chrono::seconds(10))) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
      }
    }
    for (const char* f : {"/trainsupd.log", "/ctl.log"}) unlink((dir_ + f).c_str());
    rmdir(dir_.c_str());
  }

  std::string dir_, log_, log_text_, address_;
  int port_ = 0, metrics_port_ = 0;
  pid_t pid_ = -1;
};

TEST_F(ListenerExhaustionTest, RefusesPastMaxAgentsAndListensAgainAfterAFlood) {
  // 256 descriptors: 256 - (64 + 12) = 180 agent streams; --max-agents lowered.
  const size_t max_agents = 180;
  EXPECT_NE(log_text_.find("descriptors: limit 256 (soft was 256, hard 256); up to 180 agent "
                           "streams"), std::string::npos) << log_text_;
  EXPECT_NE(log_text_.find("--max-agents=100000 lowered to 180"), std::string::npos) << log_text_;
  EXPECT_EQ(Sample(Scrape(metrics_port_), "trainsup_agent_streams_max"), 180);

  // max_agents agents, each on its own connection, welcomed; the next refused.
  std::vector<std::unique_ptr<FloodAgent>> agents;
  for (size_t i = 0; i < max_agents; ++i) {
    agents.push_back(std::make_unique<FloodAgent>(address_, static_cast<int>(i)));
    ASSERT_TRUE(agents.back()->Welcomed()) << "agent " << i << "\n" << ReadFile(log_);
  }
  {
    FloodAgent refused(address_, static_cast<int>(max_agents));
    EXPECT_FALSE(refused.Welcomed());
    grpc::Status status = refused.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(status.error_message().find("--max-agents=180"), std::string::npos)
        << status.error_message();
  }

  // The flood: silent connections past the descriptor limit.
  std::vector<int> silent;
  for (int i = 0; i < 2 * kDescriptorLimit; ++i) {
    int fd = SilentConnection(port_);
    if (fd >= 0) silent.push_back(fd);
  }
  const bool exhausted = WaitFor([&] {
    return ReadFile(log_).find("Failed accept4") != std::string::npos;
  }, std::chrono::seconds(20));
  EXPECT_TRUE(exhausted) << ReadFile(log_);

  // While the flood is on (best effort; reported, not required).
  const auto during = Clock::now();
  const int jobs_during = Jobs(address_, dir_ + "/ctl.log", "3s");
  const double during_s = std::chrono::duration<double>(Clock::now() - during).count();
  const std::string metrics_during = Scrape(metrics_port_);
  std::printf("during the flood: jobs exit %d in %.2fs; /metrics %s (process_open_fds %.0f)\n",
              jobs_during, during_s, metrics_during.empty() ? "silent" : "answered",
              Sample(metrics_during, "process_open_fds"));

  // The clients leave.
  for (int fd : silent) close(fd);
  agents.clear();

  // trainsupctl jobs answers, within a deadline.
  const auto left = Clock::now();
  int jobs_after = -1;
  const bool answered = WaitFor([&] {
    jobs_after = Jobs(address_, dir_ + "/ctl.log", "2s");
    return jobs_after == 0;
  }, std::chrono::seconds(30));
  const double after_s = std::chrono::duration<double>(Clock::now() - left).count();
  EXPECT_TRUE(answered) << "jobs exit " << jobs_after << "\n" << ReadFile(dir_ + "/ctl.log")
                        << "\n" << ReadFile(log_);
  const std::string metrics = Scrape(metrics_port_);
  const double restarts = Sample(metrics, "trainsup_listener_restarts_total");
  std::printf("after the flood: jobs answered %.2fs after the clients left; listener restarts "
              "%.0f; process_open_fds %.0f of %.0f\n", after_s, restarts,
              Sample(metrics, "process_open_fds"), Sample(metrics, "process_max_fds"));
  EXPECT_GE(restarts, 1);
  EXPECT_NE(ReadFile(log_).find("listening again on"), std::string::npos);

  // And an agent can connect again.
  FloodAgent again(address_, 0);
  EXPECT_TRUE(again.Welcomed()) << ReadFile(log_);
}

}  // namespace
}  // namespace trainsup
