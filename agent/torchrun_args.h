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
};

PreparedCommand PrepareCommand(const std::vector<std::string>& argv);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_TORCHRUN_ARGS_H_
