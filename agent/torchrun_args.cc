#include "agent/torchrun_args.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace trainsup {
namespace {

absl::string_view Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

bool IsMaxRestartsOption(absl::string_view arg) {
  return absl::StartsWith(arg, "--max_restarts") || absl::StartsWith(arg, "--max-restarts");
}

// torchrun's options that take no value; every other `--option` without an
// `=` takes the next argument as its value.
bool IsFlag(absl::string_view arg) {
  for (absl::string_view flag : {"--standalone", "--module", "-m", "--no_python", "--no-python",
                                 "--run_path", "--run-path", "-h", "--help"}) {
    if (arg == flag) return true;
  }
  return false;
}

// `name` or `name=...`.
bool IsOption(absl::string_view arg, absl::string_view name) {
  return absl::StartsWith(arg, name) && (arg.size() == name.size() || arg[name.size()] == '=');
}

// `--nnodes` or `--nnodes=...` (no other spelling exists).
bool IsNnodesOption(absl::string_view arg) { return IsOption(arg, "--nnodes"); }

// "2" -> 2, "1:4" -> 1; 0 for anything else.
uint32_t MinNodes(absl::string_view value) {
  uint32_t min = 0;
  if (!absl::SimpleAtoi(value.substr(0, value.find(':')), &min)) return 0;
  return min;
}

}  // namespace

PreparedCommand PrepareCommand(const std::vector<std::string>& argv) {
  PreparedCommand out;
  out.argv = argv;
  // Where torchrun's own options begin: after `torchrun`, or after
  // `-m torch.distributed.run` / `-m torch.distributed.launch`.
  size_t options_at = 0;
  if (!argv.empty() && Basename(argv[0]) == "torchrun") {
    options_at = 1;
  } else {
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "-m" && (argv[i + 1] == "torch.distributed.run" ||
                              argv[i + 1] == "torch.distributed.launch")) {
        options_at = i + 2;
        break;
      }
    }
  }
  if (options_at == 0) return out;
  out.is_torchrun = true;
  bool has_max_restarts = false;
  for (size_t i = options_at; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (!absl::StartsWith(arg, "-")) break;  // the training script: torchrun's options end
    const size_t eq = arg.find('=');
    // The option's value: after '=', or the next argument.
    const std::string value = eq != std::string::npos ? arg.substr(eq + 1)
                              : i + 1 < argv.size() && !IsFlag(arg) ? argv[i + 1]
                                                                    : std::string();
    if (IsNnodesOption(arg)) out.min_nodes = MinNodes(value);
    if (IsOption(arg, "--log_dir") || IsOption(arg, "--log-dir")) out.log_dir = value;
    if (!IsMaxRestartsOption(arg)) {
      // Skip the value of `--option value`.
      if (eq == std::string::npos && !IsFlag(arg)) ++i;
      continue;
    }
    has_max_restarts = true;
    if (value != "0") {
      out.warning = absl::StrCat(
          "torchrun runs with ", arg, eq == std::string::npos ? " " + value : "",
          ": torchrun may restart workers on its own, behind trainsup (the job's restart "
          "authority); use --max_restarts=0");
    }
    if (eq == std::string::npos) ++i;
  }
  if (!has_max_restarts) {
    out.argv.insert(out.argv.begin() + static_cast<std::ptrdiff_t>(options_at),
                    "--max_restarts=0");
  }
  return out;
}

}  // namespace trainsup
