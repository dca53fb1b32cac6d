#ifndef TRAINSUP_DAEMON_CORE_SIGNALS_SIGNAL_RULES_H_
#define TRAINSUP_DAEMON_CORE_SIGNALS_SIGNAL_RULES_H_

#include <memory>
#include <vector>

#include "daemon/core/signals/signal_options.h"
#include "daemon/core/signals/signal_rule.h"

namespace trainsup {

// The registry: every signal rule SignalMonitor runs through the seam
// (signal_rule.h), made for one generation from the options in force, in the
// order their events go out. A rule that is off is not made. Adding a rule
// is its class and one row here (docs/signals.md, "Adding a rule").
std::vector<std::unique_ptr<SignalRule>> MakeSignalRules(const SignalOptions& options);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_SIGNALS_SIGNAL_RULES_H_
