// The security conformance matrix: trainsupd over real TLS on loopback, with
// certificates made by tests/support/make_test_pki.sh (openssl), called by
// every kind of principal on every kind of RPC. Each cell must be allowed or
// refused exactly as docs/security.md says; the matrix is printed.
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/client.h"
#include "common/clock.h"
#include "common/credentials.h"
#include "daemon/server.h"
#include "tests/support/wait.h"
#include "trainsup/v1/agent.grpc.pb.h"
#include "trainsup/v1/operator.grpc.pb.h"

namespace trainsup {
namespace {

namespace fs = std::filesystem;

// What happened to one call, as the matrix prints it.
enum class Cell {
  kAllowed,          // past the access check (OK, NOT_FOUND, FAILED_PRECONDITION, ...)
  kDenied,           // PERMISSION_DENIED
  kUnauthenticated,  // UNAUTHENTICATED
  kNoHandshake,      // the TLS handshake failed: the call never reached trainsupd
  kClientRefused,    // the client refused to send (a token without TLS)
};

const char* CellText(Cell cell) {
  switch (cell) {
    case Cell::kAllowed: return "ok";
    case Cell::kDenied: return "denied";
    case Cell::kUnauthenticated: return "unauth";
    case Cell::kNoHandshake: return "no-tls";
    case Cell::kClientRefused: return "client";
  }
  return "?";
}

Cell CellOf(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::PERMISSION_DENIED: return Cell::kDenied;
    case grpc::StatusCode::UNAUTHENTICATED: return Cell::kUnauthenticated;
    case grpc::StatusCode::UNAVAILABLE: return Cell::kNoHandshake;
    default: return Cell::kAllowed;
  }
}

std::chrono::system_clock::time_point Soon(int ms = 3000) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

// Says hello for `node` on a fresh stream: allowed when the welcome comes.
grpc::Status Hello(grpc::Channel* channel, const std::string& node) {
  auto stub = v1::AgentService::NewStub(std::shared_ptr<grpc::Channel>(channel, [](auto*) {}));
  grpc::ClientContext context;
  context.set_deadline(Soon());
  auto stream = stub->Connect(&context);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_node(node);
  hello.mutable_hello()->set_job("j1");
  hello.mutable_hello()->set_incarnation(std::hash<std::string>()(node) | 1);
  hello.mutable_hello()->set_generation(1);
  v1::SupervisorMessage reply;
  if (stream->Write(hello) && stream->Read(&reply) && reply.has_welcome()) {
    context.TryCancel();
    return grpc::Status::OK;
  }
  return stream->Finish();
}

using Operation = std::function<grpc::Status(grpc::Channel*)>;

template <typename Request, typename Response, typename Method>
Operation Unary(Method method, std::function<void(Request*)> fill = nullptr) {
  return [method, fill](grpc::Channel* channel) {
    auto stub = v1::OperatorService::NewStub(std::shared_ptr<grpc::Channel>(channel, [](auto*) {}));
    grpc::ClientContext context;
    context.set_deadline(Soon());
    Request request;
    if (fill) fill(&request);
    Response response;
    return ((*stub).*method)(&context, request, &response);
  };
}

// The RPCs of the matrix, in column order.
std::vector<std::pair<std::string, Operation>> Operations() {
  using S = v1::OperatorService::Stub;
  auto job = [](auto* r) { r->set_job_id("j1"); };
  return {
      {"hello n1", [](grpc::Channel* c) { return Hello(c, "n1"); }},
      {"hello n2", [](grpc::Channel* c) { return Hello(c, "n2"); }},
      {"ListJobs", Unary<v1::ListJobsRequest, v1::ListJobsResponse>(&S::ListJobs)},
      {"GetJob", Unary<v1::GetJobRequest, v1::JobDetail>(&S::GetJob, std::function<void(v1::GetJobRequest*)>(job))},
      {"ListRanks", Unary<v1::ListRanksRequest, v1::ListRanksResponse>(&S::ListRanks, std::function<void(v1::ListRanksRequest*)>(job))},
      {"ListNodes", Unary<v1::ListNodesRequest, v1::ListNodesResponse>(&S::ListNodes)},
      {"ListEvents", Unary<v1::ListEventsRequest, v1::ListEventsResponse>(&S::ListEvents)},
      {"GetStacks", Unary<v1::GetStacksRequest, v1::StacksResponse>(&S::GetStacks, std::function<void(v1::GetStacksRequest*)>(job))},
      {"Diagnose", Unary<v1::DiagnoseRequest, v1::DiagnoseResponse>(&S::Diagnose, std::function<void(v1::DiagnoseRequest*)>(job))},
      {"WatchEvents",
       [](grpc::Channel* channel) {
         auto stub =
             v1::OperatorService::NewStub(std::shared_ptr<grpc::Channel>(channel, [](auto*) {}));
         grpc::ClientContext context;
         context.set_deadline(Soon(300));  // following: a deadline is how it ends
         auto reader = stub->WatchEvents(&context, v1::WatchEventsRequest());
         v1::Event event;
         while (reader->Read(&event)) {
         }
         grpc::Status s = reader->Finish();
         return s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? grpc::Status::OK : s;
       }},
      {"Quarantine", Unary<v1::QuarantineNodeRequest, v1::ActionResponse>(
                         &S::QuarantineNode, std::function<void(v1::QuarantineNodeRequest*)>(
                                                 [](auto* r) {
                                                   r->set_node("n9");
                                                   r->set_reason("conformance test");
                                                   r->set_force(true);
                                                 }))},
      {"Unquarantine", Unary<v1::UnquarantineNodeRequest, v1::ActionResponse>(
                           &S::UnquarantineNode,
                           std::function<void(v1::UnquarantineNodeRequest*)>(
                               [](auto* r) { r->set_node("n9"); }))},
      {"Resume", Unary<v1::ResumeJobRequest, v1::ActionResponse>(&S::ResumeJob, std::function<void(v1::ResumeJobRequest*)>(job))},
      {"Checkpoint", Unary<v1::RequestCheckpointRequest, v1::ActionResponse>(
                         &S::RequestCheckpoint, std::function<void(v1::RequestCheckpointRequest*)>(job))},
  };
}

struct Principal {
  std::string name;
  std::string cert;      // file stem in the PKI directory; empty: none
  bool tls = true;       // trust the CA and speak TLS
  std::string token;     // "good", "bad" or empty
  std::string expected;  // one letter per operation: o ok, d denied, u unauth, n no-tls, c client
};

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pki_ = new std::string((fs::temp_directory_path() /
                            absl::StrCat("trainsup-pki-", getpid())).string());
    const std::string command =
        absl::StrCat("bash ", TRAINSUP_SOURCE_DIR, "/tests/support/make_test_pki.sh ", *pki_);
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*pki_);
    delete pki_;
  }
  static std::string File(const std::string& name) { return absl::StrCat(*pki_, "/", name); }

  std::unique_ptr<Server> Start(bool mutual, bool token) {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "";
    options.tls.cert_file = File("server.crt");
    options.tls.key_file = File("server.key");
    if (mutual) options.tls.client_ca_file = File("ca.crt");
    if (token) options.operator_token_file = File("token");
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options, &clock_);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  // A channel for `who`, or the client's own refusal.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> ChannelFor(const Server& server,
                                                            const Principal& who,
                                                            const std::string& ca = "ca.crt") {
    ClientTlsOptions tls;
    if (who.tls) {
      tls.ca_file = File(ca);
      tls.server_name = "trainsupd";
    }
    if (!who.cert.empty()) {
      tls.cert_file = File(who.cert + ".crt");
      tls.key_file = File(who.cert + ".key");
    }
    std::string token;
    if (who.token == "good") token = *ReadTokenFile(File("token"));
    if (who.token == "bad") token = std::string(64, 'f');
    return MakeOperatorChannel(server.grpc_address(), tls, token);
  }

  // Runs every operation as every principal; prints the matrix; checks it.
  void CheckMatrix(const std::string& title, const Server& server,
                   const std::vector<Principal>& principals) {
    const auto operations = Operations();
    std::string table = absl::StrFormat("%s\n%-26s", title, "principal \\ call");
    for (const auto& [name, op] : operations) absl::StrAppendFormat(&table, " %-12s", name);
    table += "\n";
    for (const Principal& who : principals) {
      ASSERT_EQ(who.expected.size(), operations.size()) << who.name;
      absl::StrAppendFormat(&table, "%-26s", who.name);
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ChannelFor(server, who);
      for (size_t i = 0; i < operations.size(); ++i) {
        Cell cell = Cell::kClientRefused;
        std::string detail;
        if (channel.ok()) {
          grpc::Status s = operations[i].second(channel->get());
          cell = CellOf(s);
          detail = s.error_message();
        } else {
          detail = std::string(channel.status().message());
        }
        // The expected letter is the first of the cell's text.
        EXPECT_EQ(CellText(cell)[0], who.expected[i])
            << who.name << " / " << operations[i].first << ": " << detail;
        absl::StrAppendFormat(&table, " %-12s", CellText(cell));
      }
      table += "\n";
    }
    std::printf("%s\n", table.c_str());
  }

  MonotonicClock clock_;
  static std::string* pki_;
};
std::string* SecurityTest::pki_ = nullptr;

// Columns: hello n1, hello n2, 8 reads, 4 mutations.
TEST_F(SecurityTest, MutualTlsMatrix) {
  std::unique_ptr<Server> server = Start(/*mutual=*/true, /*token=*/true);
  ASSERT_NE(server, nullptr);
  CheckMatrix("mutual TLS + operator token (--tls-client-ca, --operator-token-file)", *server,
              {
                  {"no certificate", "", true, "", "uuuuuuuuuuuuuu"},
                  {"token, no certificate", "", true, "good", "uuuuuuuuuuuuuu"},
                  {"no TLS at all", "", false, "", "nnnnnnnnnnnnnn"},
                  {"other CA's operator cert", "stranger", true, "", "nnnnnnnnnnnnnn"},
                  {"expired operator cert", "expired", true, "", "nnnnnnnnnnnnnn"},
                  {"agent n1 (URI)", "agent-n1", true, "", "odoooooooodddd"},
                  {"agent n2 (DNS SAN)", "agent-n2dns", true, "", "dooooooooodddd"},
                  {"operator cert", "operator", true, "", "ddoooooooooooo"},
                  {"reader cert", "reader", true, "", "ddoooooooodddd"},
                  {"reader cert + token", "reader", true, "good", "ddoooooooooooo"},
                  {"agent n1 + wrong token", "agent-n1", true, "bad", "uuuuuuuuuuuuuu"},
                  {"token without TLS", "", false, "good", "cccccccccccccc"},
              });
  // Every refusal that reached trainsupd was counted by its reason.
  const auto refused = server->access().refused();
  EXPECT_GT(refused[static_cast<int>(Refusal::kNotOperator)], 0u);
  EXPECT_GT(refused[static_cast<int>(Refusal::kWrongNode)], 0u);
  EXPECT_EQ(refused[static_cast<int>(Refusal::kBadToken)], 14u);
}

TEST_F(SecurityTest, TokenOnlyMatrix) {
  std::unique_ptr<Server> server = Start(/*mutual=*/false, /*token=*/true);
  ASSERT_NE(server, nullptr);
  CheckMatrix("server TLS + operator token (no client CA: agents are taken on trust)", *server,
              {
                  {"anonymous over TLS", "", true, "", "oouuuuuuuuuuuu"},
                  {"token over TLS", "", true, "good", "oooooooooooooo"},
                  {"wrong token over TLS", "", true, "bad", "uuuuuuuuuuuuuu"},
                  {"token without TLS", "", false, "good", "cccccccccccccc"},
              });
  EXPECT_GT(server->access().refused()[static_cast<int>(Refusal::kUnauthenticated)], 0u);
}

TEST_F(SecurityTest, PlainTextOnTheNetworkNeedsInsecure) {
  ServerOptions options;
  options.listen = "0.0.0.0:0";
  options.metrics_listen = "";
  absl::StatusOr<std::unique_ptr<Server>> refused = Server::Start(options, &clock_);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("--insecure"));
  options.insecure = true;
  absl::StatusOr<std::unique_ptr<Server>> allowed = Server::Start(options, &clock_);
  EXPECT_TRUE(allowed.ok()) << allowed.status();
}

TEST_F(SecurityTest, TokenWithoutTlsIsRefusedAtStart) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "";
  options.operator_token_file = File("token");
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options, &clock_);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), ::testing::HasSubstr("in clear"));
}

TEST_F(SecurityTest, KeyThatDoesNotMatchTheCertificateIsRefusedNamingBoth) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "";
  options.tls.cert_file = File("server.crt");
  options.tls.key_file = File("operator.key");
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options, &clock_);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), ::testing::HasSubstr("does not match"));
}

// SIGHUP's work: the new certificate reaches new handshakes while an agent's
// stream opened before it stays up.
TEST_F(SecurityTest, ReloadServesTheNewCertificateAndKeepsOpenStreams) {
  const std::string dir = File("live");
  fs::create_directories(dir);
  fs::copy_file(File("server.crt"), dir + "/server.crt");
  fs::copy_file(File("server.key"), dir + "/server.key");
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "";
  options.tls.cert_file = dir + "/server.crt";
  options.tls.key_file = dir + "/server.key";
  options.tls.client_ca_file = File("ca.crt");
  absl::StatusOr<std::unique_ptr<Server>> started = Server::Start(options, &clock_);
  ASSERT_TRUE(started.ok()) << started.status();
  Server& server = **started;

  // An agent stream, open before the reload.
  Principal agent{"agent n1", "agent-n1", true, "", ""};
  absl::StatusOr<std::shared_ptr<grpc::Channel>> agent_channel = ChannelFor(server, agent);
  ASSERT_TRUE(agent_channel.ok());
  auto agent_stub = v1::AgentService::NewStub(*agent_channel);
  grpc::ClientContext agent_context;
  auto stream = agent_stub->Connect(&agent_context);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_node("n1");
  hello.mutable_hello()->set_job("j1");
  hello.mutable_hello()->set_incarnation(11);
  hello.mutable_hello()->set_generation(1);
  v1::SupervisorMessage reply;
  ASSERT_TRUE(stream->Write(hello) && stream->Read(&reply) && reply.has_welcome());

  // A client that trusts only the other CA cannot connect yet.
  Principal op{"operator", "operator", true, "", ""};
  auto list_jobs = Operations()[2].second;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> new_trust = ChannelFor(server, op, "other-ca.crt");
  ASSERT_TRUE(new_trust.ok());
  EXPECT_EQ(CellOf(list_jobs(new_trust->get())), Cell::kNoHandshake);

  // A broken file is refused and changes nothing.
  fs::copy_file(File("operator.key"), dir + "/server.key", fs::copy_options::overwrite_existing);
  EXPECT_FALSE(server.ReloadCertificates().ok());
  fs::copy_file(File("server.key"), dir + "/server.key", fs::copy_options::overwrite_existing);

  // The renewed certificate (signed by the other CA), then the reload.
  fs::copy_file(File("server2.crt"), dir + "/server.crt", fs::copy_options::overwrite_existing);
  fs::copy_file(File("server2.key"), dir + "/server.key", fs::copy_options::overwrite_existing);
  ASSERT_TRUE(server.ReloadCertificates().ok());
  EXPECT_TRUE(testing::WaitFor([&] {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> fresh = ChannelFor(server, op, "other-ca.crt");
    return fresh.ok() && CellOf(list_jobs(fresh->get())) == Cell::kAllowed;
  }));

  // The agent's stream is the one it opened before: still up, still heard.
  v1::AgentMessage report;
  report.mutable_report();
  ASSERT_TRUE(stream->Write(report));
  absl::StatusOr<std::shared_ptr<grpc::Channel>> fresh = ChannelFor(server, op, "other-ca.crt");
  ASSERT_TRUE(fresh.ok());
  auto stub = v1::OperatorService::NewStub(*fresh);
  grpc::ClientContext context;
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(stub->ListNodes(&context, v1::ListNodesRequest(), &nodes).ok());
  ASSERT_EQ(nodes.nodes_size(), 1);
  EXPECT_TRUE(nodes.nodes(0).connected());
  EXPECT_EQ(nodes.nodes(0).agent_incarnation(), 11u);
  agent_context.TryCancel();
}

}  // namespace
}  // namespace trainsup
