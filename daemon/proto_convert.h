#ifndef TRAINSUP_DAEMON_PROTO_CONVERT_H_
#define TRAINSUP_DAEMON_PROTO_CONVERT_H_

#include "daemon/core/heartbeat.h"
#include "daemon/core/supervisor.h"
#include "trainsup/v1/agent.pb.h"
#include "trainsup/v1/checkpoint_plan.pb.h"
#include "trainsup/v1/heartbeat.pb.h"

namespace trainsup {

// Wire types -> the core's own types. Pure copies: validation is the core's job.
Heartbeat FromProto(const v1::RankHeartbeat& in);
// Into `out`, reusing its memory (every field is assigned).
void FromProto(const v1::RankHeartbeat& in, Heartbeat* out);
LauncherInfo FromProto(const v1::LauncherStatus& in);
RankProcessInfo FromProto(const v1::RankProcess& in);
KillCriteriaSpec FromProto(const v1::KillCriteria& in);
void ToProto(const KillCriteriaSpec& in, v1::KillCriteria* out);
AgentHelloInfo FromProto(const v1::AgentHello& in);
NodeReportInfo FromProto(const v1::NodeReport& in);
// Into `out`, reusing its vectors and strings: a stream converts each report
// into the same NodeReportInfo.
void FromProto(const v1::NodeReport& in, NodeReportInfo* out);
StacksInfo FromProto(const v1::StacksReport& in);
GpuErrorInfo FromProto(const v1::GpuError& in);
GpuHealthInfo FromProto(const v1::GpuHealthReport& in);
// The core's reason of the same name; a value this supervisor does not know
// (from a newer agent), and UNSPECIFIED, are kOther.
RejectReason FromProto(v1::RejectReason in);

// A core decision -> the message its agent receives.
v1::SupervisorMessage ToProto(const AgentCommand& command);
// A plan as the agents receive it and operators read it (`out` is cleared).
void ToProto(const CheckpointPlanSpec& plan, v1::CheckpointPlan* out);

// Where a generation meets, as one agent is told (its welcome or start).
v1::Rendezvous ToProto(const RendezvousSpec& spec);
// Which checkpoint a generation loads, which batches it skips.
v1::ResumeAdvice ToProto(const ResumeAdvice& advice);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_PROTO_CONVERT_H_
