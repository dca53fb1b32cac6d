#ifndef TRAINSUP_COMMON_FREE_PORT_H_
#define TRAINSUP_COMMON_FREE_PORT_H_

#include <cstdint>

namespace trainsup {

// A TCP port free on every address of this host now (0 when none could be
// had): the kernel's pick for a socket bound to port 0. Free now, not
// reserved: another process may take it before the caller binds it.
uint32_t FreePort();

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_FREE_PORT_H_
