#include "daemon/core/reconciler.h"

#include "absl/strings/str_cat.h"

namespace trainsup {

void Reconciler::Command(const NodeRecord& node, AgentCommand::Kind kind, uint64_t generation,
                         const std::string& reason, bool collect_stacks,
                         std::optional<RendezvousSpec> rendezvous, ResumeAdvice resume) {
  AgentCommand c;
  c.session = node.session;
  c.node = node.name;
  c.kind = kind;
  c.generation = generation;
  c.reason = reason;
  c.grace = stop_grace_;
  c.collect_stacks = collect_stacks;
  c.rendezvous = std::move(rendezvous);
  c.resume = std::move(resume);
  decisions_.Command(std::move(c));
}

// The plans go to every agent, in order, so that its ranks hold what every
// other rank holds.
void Reconciler::SendPlans(const JobEntry& job, NodeRecord& node) {
  for (const CheckpointPlanSpec& plan : job.plans().plans()) {
    if (plan.plan_id <= node.told.plan_id) continue;
    AgentCommand c;
    c.session = node.session;
    c.node = node.name;
    c.kind = AgentCommand::Kind::kPlan;
    c.plan = plan;
    decisions_.Command(std::move(c));
    node.told.plan_id = plan.plan_id;
  }
}

void Reconciler::Reconcile(const JobEntry& job) {
  const JobLifecycle& life = job.lifecycle();
  const uint64_t generation = job.job().generation();
  for (NodeIndex i : agents_.NodesOf(job.id())) {
    NodeRecord& node = agents_.mutable_node(i);
    if (!node.connected) continue;
    if (quarantine_.IsQuarantined(node.name)) {
      if (!node.told.quarantine) {
        Command(node, AgentCommand::Kind::kQuarantine, generation, quarantine_.ReasonOf(node.name));
        node.told.quarantine = true;
      }
      continue;
    }
    SendPlans(job, node);
    switch (life.state) {
      case JobState::kStopping:
        if (node.running() && node.told.stop_generation != generation + 1) {
          Command(node, AgentCommand::Kind::kStop, node.generation, life.reason,
                  life.collect_stacks);
          node.told.stop_generation = generation + 1;
        }
        break;
      case JobState::kPending:
      case JobState::kRunning:
        // Only a member of the generation is started: a node cut from it
        // waits for the next one (fenced by generation: no split brain).
        if (node.stopped() && node.generation < generation &&
            node.member_generation == generation && node.told.start_generation != generation) {
          Command(node, AgentCommand::Kind::kStart, generation, life.reason, false,
                  job.rendezvous().For(generation, node.name), job.fallback().advice());
          node.told.start_generation = generation;
          node.told.hold = false;
        } else if (node.running() && node.generation < generation &&
                   node.told.stop_generation != node.generation + 1) {
          // It missed a restart (it was away): stop it, then it gets a start.
          Command(node, AgentCommand::Kind::kStop, node.generation,
                  absl::StrCat("generation ", node.generation, " is stale; the job runs ",
                               generation));
          node.told.stop_generation = node.generation + 1;
        }
        break;
      case JobState::kHeld:
      case JobState::kKilled:
        if (!node.told.hold) {
          Command(node, AgentCommand::Kind::kHold, generation, life.reason);
          node.told.hold = true;
        }
        break;
      case JobState::kRestarting:
      case JobState::kFinished:
      case JobState::kFailed:
      case JobState::kCount:
        break;
    }
  }
}

}  // namespace trainsup
