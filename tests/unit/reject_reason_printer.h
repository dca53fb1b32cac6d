#ifndef TRAINSUP_TESTS_UNIT_REJECT_REASON_PRINTER_H_
#define TRAINSUP_TESTS_UNIT_REJECT_REASON_PRINTER_H_

#include <ostream>

#include "daemon/core/reject_reason.h"

namespace trainsup {

// Lets GoogleTest print a RejectReason by name ("bad_kind") in failure
// messages instead of as raw bytes. Found by argument-dependent lookup.
inline void PrintTo(RejectReason reason, std::ostream* os) {
  *os << RejectReasonName(reason);
}

}  // namespace trainsup

#endif  // TRAINSUP_TESTS_UNIT_REJECT_REASON_PRINTER_H_
