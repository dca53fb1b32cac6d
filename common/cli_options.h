#ifndef TRAINSUP_COMMON_CLI_OPTIONS_H_
#define TRAINSUP_COMMON_CLI_OPTIONS_H_

// CLI11 glue shared by the binaries. Include only from a binary's
// main.cc: CLI11 costs seconds of compile time per translation unit.

#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/credentials.h"
#include "common/options.h"
#include "common/supervisor_addresses.h"

namespace trainsup {

// What a duration option accepts.
enum class DurationBound {
  kZeroOrMore,
  kPositive,  // zero is refused too (a deadline, a period)
};

// Adds `--name DURATION` ("5s", "1m30s", "200ms") bound to `*target`, whose
// value on entry is the default shown in --help.
inline CLI::Option* AddDurationOption(CLI::App& app, const std::string& name,
                                      absl::Duration* target, const std::string& help,
                                      DurationBound bound = DurationBound::kZeroOrMore) {
  CLI::Option* option = app.add_option_function<std::string>(
      name,
      [name, target, bound](const std::string& text) {
        absl::StatusOr<absl::Duration> d = bound == DurationBound::kPositive
                                               ? ParsePositiveDurationOption(text)
                                               : ParseDurationOption(text);
        if (!d.ok()) throw CLI::ValidationError(name, std::string(d.status().message()));
        *target = *d;
      },
      help);
  option->type_name("DURATION");
  option->default_str(absl::FormatDuration(*target));
  return option;
}

// --tls-ca, --tls-cert, --tls-key, --tls-server-name, each also read from
// $TRAINSUP_TLS_CA, $TRAINSUP_TLS_CERT, ... (the flag wins).
inline void AddClientTlsOptions(CLI::App& app, ClientTlsOptions* tls) {
  app.add_option("--tls-ca", tls->ca_file,
                 "PEM CA bundle that signed trainsupd's certificate: speak TLS to it")
      ->envname("TRAINSUP_TLS_CA")->type_name("FILE");
  app.add_option("--tls-cert", tls->cert_file,
                 "PEM certificate of this client, for mutual TLS (with --tls-key)")
      ->envname("TRAINSUP_TLS_CERT")->type_name("FILE");
  app.add_option("--tls-key", tls->key_file, "PEM private key of --tls-cert")
      ->envname("TRAINSUP_TLS_KEY")->type_name("FILE");
  app.add_option("--tls-server-name", tls->server_name,
                 "name expected in trainsupd's certificate (default: the host of --supervisor)")
      ->envname("TRAINSUP_TLS_SERVER_NAME");
}

// A HOST:PORT option value check; `allow_empty`: "" passes (an endpoint
// turned off).
inline CLI::Validator HostPortValidator(bool allow_empty = false) {
  return CLI::Validator(
      [allow_empty](std::string& text) -> std::string {
        if (allow_empty && text.empty()) return std::string();
        absl::Status s = CheckHostPort(text);
        return s.ok() ? std::string() : std::string(s.message());
      },
      "");
}

// A list of trainsupd addresses, HOST:PORT[,HOST:PORT...] (docs/ha.md).
inline CLI::Validator SupervisorListValidator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        absl::StatusOr<SupervisorAddresses> list = SupervisorAddresses::Parse(text);
        return list.ok() ? std::string() : std::string(list.status().message());
      },
      "");
}

// A whole number of at least `min`, written in decimal digits: "-1" is not
// read as 2^64-1 into an unsigned option, nor "010" as octal.
inline CLI::Validator WholeNumberValidator(uint64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        absl::Status s = CheckWholeNumber(text, min);
        return s.ok() ? std::string() : std::string(s.message());
      },
      "");
}

// A number in [min, max] (either may be infinite), said in plain figures.
inline CLI::Validator NumberValidator(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        absl::Status s = CheckNumber(text, min, max);
        return s.ok() ? std::string() : std::string(s.message());
      },
      "");
}

// A number > 0.
inline CLI::Validator PositiveValidator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        absl::Status s = CheckPositiveNumber(text);
        return s.ok() ? std::string() : std::string(s.message());
      },
      "");
}

// Sets up what every binary's command line shares: a repeated option takes
// its last value (scripts append overrides), `--version` prints
// VersionLine(name), and --help ends with `exit_codes`. Errors are printed
// by ParseOrExitCode.
inline void ConfigureApp(CLI::App& app, const std::string& version_line,
                         const std::string& exit_codes) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_version_flag("--version", version_line, "print the binary's name, version and commit");
  app.footer(exit_codes);
}

// Prints a usage error the way every binary does ("error: ...", then where
// to read more) and returns kExitUsage.
inline int UsageErrorExit(const std::string& message) {
  std::fprintf(stderr, "error: %s\nRun with --help for more information.\n", message.c_str());
  return kExitUsage;
}

// What a parse error says, naming the word at fault. CLI11 2.1.2 names it
// badly: its list of unexpected words comes reversed (`--lisen X` reads "X
// --lisen"), and a word that is no subcommand reads "A subcommand is
// required". The words the parse left over are in `app.remaining()`, in the
// order typed.
inline std::string UsageErrorText(const CLI::App& app, const CLI::ParseError& e) {
  // The deepest command parsed: where the words were typed.
  const CLI::App* at = &app;
  while (!at->get_subcommands().empty()) at = at->get_subcommands().front();
  std::vector<std::string> left;
  for (std::string& word : app.remaining(/*recurse=*/true)) {
    if (word != "--") left.push_back(std::move(word));
  }
  const bool needs_command = at->get_require_subcommand_min() > 0;
  const bool extras = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr;
  const bool required = dynamic_cast<const CLI::RequiredError*>(&e) != nullptr;
  if (!extras && !(needs_command && required)) return e.what();
  std::vector<std::string> commands;
  for (const CLI::App* sub :
       at->get_subcommands([](const CLI::App* s) { return !s->get_name().empty(); })) {
    commands.push_back(sub->get_name());
  }
  const std::string one_of = absl::StrJoin(commands, ", ");
  if (left.empty()) {
    return extras ? e.what() : absl::StrCat(at->get_name(), " needs a command: ", one_of);
  }
  const std::string& word = left.front();
  if (word.size() > 1 && word[0] == '-') {
    return absl::StrCat("unknown option ", word.substr(0, word.find('=')));
  }
  if (needs_command) {
    return absl::StrCat("'", word, "' is not a command of ", at->get_name(), "; the commands: ",
                        one_of);
  }
  return absl::StrCat("unexpected argument '", word, "'");
}

// Parses argv; on error or --help prints CLI11's message (an error as
// UsageErrorText says it) and returns the exit code to use (kExitUsage for
// errors, 0 for --help); -1 when parsing succeeded.
inline int ParseOrExitCode(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return UsageErrorExit(UsageErrorText(app, e));
  }
  return -1;
}

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_CLI_OPTIONS_H_
