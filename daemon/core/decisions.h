#ifndef TRAINSUP_DAEMON_CORE_DECISIONS_H_
#define TRAINSUP_DAEMON_CORE_DECISIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "daemon/core/agent_registry.h"
#include "daemon/core/checkpoint_fallback.h"
#include "daemon/core/checkpoint_schedule.h"
#include "daemon/core/event_log.h"
#include "daemon/core/journal.h"
#include "daemon/core/rendezvous.h"

namespace trainsup {

class JobEntry;

// A decision for one agent, to send down its stream.
struct AgentCommand {
  enum class Kind {
    kStop,        // SIGTERM the command's group (SIGKILL after `grace`), then wait
    kStart,       // launch the command as `generation`
    kHold,        // the job is held: stay stopped, wait for a start
    kQuarantine,  // this node is quarantined: stop, do not launch, exit
    kPlan,        // a checkpoint plan (in `plan`) for the ranks
    kSettings,    // report every `report_interval` from now on
  };
  SessionId session = 0;
  std::string node;
  Kind kind = Kind::kStop;
  uint64_t generation = 0;
  std::string reason;
  absl::Duration grace;
  bool collect_stacks = false;  // kStop: send the ranks' Python stacks up first
  CheckpointPlanSpec plan;      // kPlan
  absl::Duration report_interval;  // kSettings
  std::optional<RendezvousSpec> rendezvous;  // kStart: where it meets (unset: as its command says)
  ResumeAdvice resume;  // kStart: which checkpoint to load, which batches to skip
};

// Ask the cluster scheduler to fence a node (the driver runs --fence-command)
// or to take it back (--unfence-command).
struct FenceRequest {
  std::string node;
  std::string reason;
  absl::Time decided = absl::InfinitePast();
  FenceAction action = FenceAction::kFence;
  // Set by Decisions::Fence: tells which decision a FenceDone answers.
  uint64_t id = 0;
};

// Everything the core decided since it was last asked: the driver persists
// `journal` first, then sends `commands`, runs `fences` and logs `events`.
struct SupervisorOutput {
  std::vector<Event> events;
  std::vector<AgentCommand> commands;
  std::vector<FenceRequest> fences;
  Journal journal;
};

// Where the core's rules put what they decide, in the order decided: events
// (kept in the bounded event log and journaled), agent commands, fences and
// the records to persist. Thread-compatible.
class Decisions {
 public:
  explicit Decisions(size_t event_log_size) : events_(event_log_size) {}
  Decisions(const Decisions&) = delete;
  Decisions& operator=(const Decisions&) = delete;

  // Logs `event` (and journals it). With `job`, counts it on the job.
  // REQUIRES: `event` names `job` (events.h: EventJobOf), or no job when
  // `job` is null.
  const Event& Emit(JobEntry* job, Event event);
  void Command(AgentCommand command) { output_.commands.push_back(std::move(command)); }
  // A fence or unfence to run, journaled as pending first (journal.h:
  // FenceRow). It replaces the node's pending one in the store; the driver
  // still runs both, in the order decided, so the last one decided is the
  // one the scheduler ends with.
  void Fence(FenceRequest fence);
  // The command for `request` succeeded: its pending row is cleared, unless
  // a later decision for the node replaced it (that one stays pending until
  // it ran itself).
  void FenceSucceeded(absl::Time now, const FenceRequest& request);
  // `node` needs no fence command any more: its pending row is cleared.
  void DropFence(absl::Time now, const std::string& node);
  Journal& journal() { return output_.journal; }
  // The events decided since the last Take(), in order.
  const std::vector<Event>& pending_events() const { return output_.events; }

  // Takes what was decided since the last call.
  SupervisorOutput Take();

  const EventLog& events() const { return events_; }
  // Puts back events read from the state store.
  void RestoreEvents(const std::vector<Event>& events) { events_.Restore(events); }

 private:
  EventLog events_;
  SupervisorOutput output_;
  // Node -> the id of its pending fence or unfence (the one in the store).
  absl::flat_hash_map<std::string, uint64_t> pending_fences_;
  uint64_t next_fence_id_ = 1;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_DECISIONS_H_
