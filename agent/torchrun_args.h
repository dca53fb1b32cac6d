#ifndef TRAINSUP_AGENT_TORCHRUN_ARGS_H_
#define TRAINSUP_AGENT_TORCHRUN_ARGS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace trainsup {

// trainsup is the only restart authority of a job: torchrun must not restart
// workers on its own, or a failure is restarted twice (once by torchrun on
// one node, once everywhere by trainsup). For a torchrun command (`torchrun
// ...`, `python -m torch.distributed.run ...`) without a max-restarts
// option, inserts `--max_restarts=0` (the spelling every torch version
// accepts) right after the torchrun token. Other commands are left alone.
//
// It also reads how few nodes the job can run on: torchrun's `--nnodes N`
// (N) or `--nnodes MIN:MAX` (MIN), which the supervisor needs before it
// leaves a node out of a generation (a restart-elsewhere verdict); and
// where torchrun writes its ranks' output (`--log_dir`).
// torchrun's rendezvous as the command sets it: the c10d backend (a store
// in one node's torchrun, at --rdzv_endpoint), the static one (the store
// of node rank 0, at --master_addr:--master_port), or one trainsupd does
// not move (another backend, --standalone, or not torchrun at all).
enum class CommandRendezvous { kNone, kC10d, kStatic };

struct PreparedCommand {
  std::vector<std::string> argv;
  bool is_torchrun = false;
  // Set when the user's own max-restarts is not 0 (left as it is).
  std::string warning;
  // The fewest nodes the command runs on; 0 when it does not say.
  uint32_t min_nodes = 0;
  // torchrun's --log_dir (where --redirects writes each rank's output);
  // empty when not given (torchrun then makes a fresh temporary one).
  std::string log_dir;
  // Its rendezvous, and for a static one the command's own --node_rank.
  CommandRendezvous rendezvous = CommandRendezvous::kNone;
  uint32_t node_rank = 0;
};

PreparedCommand PrepareCommand(const std::vector<std::string>& argv);

// Where one generation meets, as the supervisor told this node.
struct RendezvousArgs {
  std::string address;  // the host's
  uint32_t port = 0;
  bool is_host = false;    // c10d: this node's torchrun hosts the store
  uint32_t node_rank = 0;  // static: this node's rank (the host's is 0)
};

// `argv` (a prepared torchrun command of rendezvous `kind`) rewritten to
// meet at `args` for one generation. c10d: --rdzv_endpoint=ADDRESS:PORT
// (an IPv6 address in brackets) and is_host=1|0 in --rdzv_conf, the
// conf's other keys kept; static: --master_addr, --master_port and
// --node_rank. An option the command gives is replaced where it stands
// (both spellings, `--opt=v` and `--opt v`); one it lacks is added after
// the torchrun token. kNone: `argv` as it is.
std::vector<std::string> RewriteRendezvous(const std::vector<std::string>& argv,
                                           CommandRendezvous kind, const RendezvousArgs& args);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_TORCHRUN_ARGS_H_
