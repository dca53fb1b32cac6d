#ifndef TRAINSUP_DAEMON_PROTO_CONVERT_H_
#define TRAINSUP_DAEMON_PROTO_CONVERT_H_

#include "daemon/core/heartbeat.h"
#include "trainsup/v1/agent.pb.h"
#include "trainsup/v1/heartbeat.pb.h"

namespace trainsup {

// Wire types -> the core's own types. Pure copies: validation is the core's job.
Heartbeat FromProto(const v1::RankHeartbeat& in);
LauncherInfo FromProto(const v1::LauncherStatus& in);
RankProcessInfo FromProto(const v1::RankProcess& in);
AgentHelloInfo FromProto(const v1::AgentHello& in);
NodeReportInfo FromProto(const v1::NodeReport& in);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_PROTO_CONVERT_H_
