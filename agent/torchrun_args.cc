#include "agent/torchrun_args.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace trainsup {
namespace {

absl::string_view Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
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

// One of torchrun's options as the command gives it.
struct Option {
  size_t at = 0;       // its index in argv
  std::string name;    // "--rdzv_endpoint": dashes after the first two read as '_'
  std::string value;   // after '=', or the next argument
  bool separate = false;  // the value is the next argument
};

// Where torchrun's own options begin: after `torchrun`, or after `-m
// torch.distributed.run` / `-m torch.distributed.launch`; 0 when `argv` is
// not a torchrun command.
size_t OptionsAt(const std::vector<std::string>& argv) {
  if (!argv.empty() && Basename(argv[0]) == "torchrun") return 1;
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "-m" && (argv[i + 1] == "torch.distributed.run" ||
                            argv[i + 1] == "torch.distributed.launch")) {
      return i + 2;
    }
  }
  return 0;
}

// torchrun's options in `argv`, up to the training script.
std::vector<Option> OptionsOf(const std::vector<std::string>& argv, size_t options_at) {
  std::vector<Option> options;
  for (size_t i = options_at; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (!absl::StartsWith(arg, "-")) break;  // the training script: torchrun's options end
    Option o;
    o.at = i;
    const size_t eq = arg.find('=');
    o.name = arg.substr(0, eq);
    if (absl::StartsWith(o.name, "--")) {
      std::replace(o.name.begin() + 2, o.name.end(), '-', '_');
    }
    if (eq != std::string::npos) {
      o.value = arg.substr(eq + 1);
    } else if (!IsFlag(arg) && i + 1 < argv.size()) {
      o.value = argv[i + 1];
      o.separate = true;
      ++i;  // skip the value
    }
    options.push_back(std::move(o));
  }
  return options;
}

const Option* Find(const std::vector<Option>& options, absl::string_view name) {
  for (const Option& o : options) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

// "2" -> 2, "1:4" -> 1; 0 for anything else.
uint32_t MinNodes(absl::string_view value) {
  uint32_t min = 0;
  if (!absl::SimpleAtoi(value.substr(0, value.find(':')), &min)) return 0;
  return min;
}

// Sets option `name` of `argv` to `value` where the command gives it, or
// adds it at `options_at`.
void SetOption(std::vector<std::string>& argv, size_t options_at, absl::string_view name,
               const std::string& value) {
  const std::vector<Option> options = OptionsOf(argv, options_at);
  if (const Option* o = Find(options, name); o != nullptr) {
    if (o->separate) {
      argv[o->at + 1] = value;
    } else {
      argv[o->at] = absl::StrCat(argv[o->at].substr(0, argv[o->at].find('=')), "=", value);
    }
    return;
  }
  argv.insert(argv.begin() + static_cast<std::ptrdiff_t>(options_at),
              absl::StrCat(name, "=", value));
}

}  // namespace

PreparedCommand PrepareCommand(const std::vector<std::string>& argv) {
  PreparedCommand out;
  out.argv = argv;
  const size_t options_at = OptionsAt(argv);
  if (options_at == 0) return out;
  out.is_torchrun = true;
  const std::vector<Option> options = OptionsOf(argv, options_at);
  if (const Option* o = Find(options, "--nnodes"); o != nullptr) out.min_nodes = MinNodes(o->value);
  if (const Option* o = Find(options, "--log_dir"); o != nullptr) out.log_dir = o->value;

  const Option* backend = Find(options, "--rdzv_backend");
  if (Find(options, "--standalone") == nullptr) {
    if (backend != nullptr && backend->value == "c10d") {
      out.rendezvous = CommandRendezvous::kC10d;
    } else if (backend == nullptr || backend->value == "static") {
      out.rendezvous = CommandRendezvous::kStatic;
      if (const Option* o = Find(options, "--node_rank"); o != nullptr) {
        if (!absl::SimpleAtoi(o->value, &out.node_rank)) out.rendezvous = CommandRendezvous::kNone;
      }
    }
  }

  const Option* max_restarts = Find(options, "--max_restarts");
  if (max_restarts == nullptr) {
    out.argv.insert(out.argv.begin() + static_cast<std::ptrdiff_t>(options_at),
                    "--max_restarts=0");
  } else if (max_restarts->value != "0") {
    const std::string& arg = argv[max_restarts->at];
    out.warning = absl::StrCat(
        "torchrun runs with ", arg, max_restarts->separate ? " " + max_restarts->value : "",
        ": torchrun may restart workers on its own, behind trainsup (the job's restart "
        "authority); use --max_restarts=0");
  }
  return out;
}

std::vector<std::string> RewriteRendezvous(const std::vector<std::string>& argv,
                                           CommandRendezvous kind, const RendezvousArgs& args) {
  std::vector<std::string> out = argv;
  const size_t options_at = OptionsAt(argv);
  if (options_at == 0) return out;
  switch (kind) {
    case CommandRendezvous::kNone:
      break;
    case CommandRendezvous::kC10d: {
      const bool v6 = args.address.find(':') != std::string::npos;
      SetOption(out, options_at, "--rdzv_endpoint",
                v6 ? absl::StrCat("[", args.address, "]:", args.port)
                   : absl::StrCat(args.address, ":", args.port));
      std::vector<std::string> conf;
      const std::vector<Option> options = OptionsOf(out, options_at);
      if (const Option* o = Find(options, "--rdzv_conf"); o != nullptr) {
        for (absl::string_view kv : absl::StrSplit(o->value, ',', absl::SkipEmpty())) {
          if (kv.substr(0, kv.find('=')) != "is_host") conf.emplace_back(kv);
        }
      }
      conf.push_back(absl::StrCat("is_host=", args.is_host ? 1 : 0));
      SetOption(out, options_at, "--rdzv_conf", absl::StrJoin(conf, ","));
      break;
    }
    case CommandRendezvous::kStatic:
      SetOption(out, options_at, "--master_addr", args.address);
      SetOption(out, options_at, "--master_port", absl::StrCat(args.port));
      SetOption(out, options_at, "--node_rank", absl::StrCat(args.node_rank));
      break;
  }
  return out;
}

}  // namespace trainsup
