#ifndef TRAINSUP_COMMON_CLI_OPTIONS_H_
#define TRAINSUP_COMMON_CLI_OPTIONS_H_

// CLI11 glue shared by the three binaries. Include only from a binary's
// main.cc: CLI11 costs seconds of compile time per translation unit.

#include <string>

#include <CLI/CLI.hpp>

#include "absl/time/time.h"
#include "common/credentials.h"
#include "common/options.h"

namespace trainsup {

// Adds `--name DURATION` ("5s", "1m30s", "200ms") bound to `*target`, whose
// value on entry is the default shown in --help.
inline CLI::Option* AddDurationOption(CLI::App& app, const std::string& name,
                                      absl::Duration* target, const std::string& help) {
  CLI::Option* option = app.add_option_function<std::string>(
      name,
      [target](const std::string& text) {
        absl::StatusOr<absl::Duration> d = ParseDurationOption(text);
        if (!d.ok()) throw CLI::ValidationError(std::string(d.status().message()));
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

// A HOST:PORT option value check.
inline CLI::Validator HostPortValidator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        absl::Status s = CheckHostPort(text);
        return s.ok() ? std::string() : std::string(s.message());
      },
      "");
}

// Parses argv; on error or --help prints CLI11's message and returns the exit
// code to use (kExitUsage for errors, 0 for --help); -1 when parsing succeeded.
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
    app.exit(e);
    return kExitUsage;
  }
  return -1;
}

inline const char* ExitCodesHelp() {
  return "Exit codes: 0 ok; 1 the request failed; 2 bad usage; 3 cannot reach the supervisor;\n"
         "4 no such job or node; 5 refused (no identity, or not allowed); 75 (agent) this node\n"
         "is quarantined; 76 (agent) another agent serves this --node.";
}

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_CLI_OPTIONS_H_
