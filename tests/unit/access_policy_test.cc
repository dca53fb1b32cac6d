// AccessPolicy: who may do what, as a pure function of the caller.
#include "daemon/access_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainsup {
namespace {

using ::testing::HasSubstr;

Caller Agent(const std::string& node) {
  Caller c;
  c.certified = true;
  c.nodes = {node};
  return c;
}

Caller Operator() {
  Caller c;
  c.certified = true;
  c.operator_certificate = true;
  return c;
}

AccessPolicy Mutual() { return AccessPolicy({/*authenticate=*/true, /*agents_need_certificate=*/true}); }

TEST(AccessPolicyTest, OpenModeAllowsEveryone) {
  AccessPolicy open({});
  EXPECT_TRUE(open.open());
  EXPECT_TRUE(open.Decide(Caller(), Access::kMutate).allowed());
  EXPECT_TRUE(open.Decide(Caller(), Access::kAgentHello, "n1").allowed());
}

TEST(AccessPolicyTest, AnAgentSaysHelloOnlyAsItsOwnNode) {
  EXPECT_TRUE(Mutual().Decide(Agent("n1"), Access::kAgentHello, "n1").allowed());
  AccessDecision other = Mutual().Decide(Agent("n1"), Access::kAgentHello, "n2");
  EXPECT_EQ(other.refusal, Refusal::kWrongNode);
  EXPECT_THAT(other.message, HasSubstr("node n1"));
  EXPECT_THAT(other.message, HasSubstr("node n2"));
}

TEST(AccessPolicyTest, ACertificateNamingNoNodeCannotSayHello) {
  AccessDecision d = Mutual().Decide(Operator(), Access::kAgentHello, "n1");
  EXPECT_EQ(d.refusal, Refusal::kWrongNode);
  EXPECT_THAT(d.message, HasSubstr("trainsup:node:n1"));
}

TEST(AccessPolicyTest, AnAgentReadsButChangesNothing) {
  EXPECT_TRUE(Mutual().Decide(Agent("n1"), Access::kRead).allowed());
  AccessDecision d = Mutual().Decide(Agent("n1"), Access::kMutate);
  EXPECT_EQ(d.refusal, Refusal::kNotOperator);
  EXPECT_THAT(d.message, HasSubstr("trainsup:role:operator"));
}

TEST(AccessPolicyTest, OperatorsByCertificateOrToken) {
  EXPECT_TRUE(Mutual().Decide(Operator(), Access::kMutate).allowed());
  Caller reader_with_token = Agent("n1");
  reader_with_token.token = Caller::Token::kValid;
  EXPECT_TRUE(Mutual().Decide(reader_with_token, Access::kMutate).allowed());
  AccessPolicy token_only({/*authenticate=*/true, /*agents_need_certificate=*/false});
  Caller token;
  token.token = Caller::Token::kValid;
  EXPECT_TRUE(token_only.Decide(token, Access::kMutate).allowed());
  EXPECT_TRUE(token_only.Decide(token, Access::kRead).allowed());
}

TEST(AccessPolicyTest, UnderMutualTlsEveryCallNeedsACertificateEvenWithTheToken) {
  Caller token;
  token.token = Caller::Token::kValid;
  for (const Caller& caller : {Caller(), token}) {
    for (Access access : {Access::kRead, Access::kMutate, Access::kAgentHello}) {
      AccessDecision d = Mutual().Decide(caller, access, "n1");
      EXPECT_EQ(d.refusal, Refusal::kUnauthenticated) << caller.Describe();
      EXPECT_THAT(d.message, HasSubstr("needs a client certificate"));
    }
  }
}

TEST(AccessPolicyTest, AWrongTokenIsRefusedEvenBesideAGoodCertificate) {
  Caller c = Operator();
  c.token = Caller::Token::kInvalid;
  EXPECT_EQ(Mutual().Decide(c, Access::kRead).refusal, Refusal::kBadToken);
  EXPECT_EQ(Mutual().Decide(c, Access::kMutate).refusal, Refusal::kBadToken);
}

TEST(AccessPolicyTest, AnonymousCallersNeedAnIdentity) {
  AccessPolicy token_only({/*authenticate=*/true, /*agents_need_certificate=*/false});
  EXPECT_EQ(token_only.Decide(Caller(), Access::kRead).refusal, Refusal::kUnauthenticated);
  EXPECT_EQ(token_only.Decide(Caller(), Access::kMutate).refusal, Refusal::kUnauthenticated);
  // Without client certificates no agent can prove a node: hellos are taken on trust.
  EXPECT_TRUE(token_only.Decide(Caller(), Access::kAgentHello, "n1").allowed());
}

TEST(AccessPolicyTest, CallersDescribeThemselves) {
  EXPECT_EQ(Caller().Describe(), "anonymous");
  EXPECT_EQ(Agent("n1").Describe(), "certificate for node n1");
  Caller c = Operator();
  c.token = Caller::Token::kValid;
  EXPECT_EQ(c.Describe(), "operator certificate + operator token");
}

}  // namespace
}  // namespace trainsup
