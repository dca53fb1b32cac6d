#ifndef TRAINSUP_COMMON_RANDOM_ID_H_
#define TRAINSUP_COMMON_RANDOM_ID_H_

#include <cstdint>

namespace trainsup {

// A random 64-bit id from the system's entropy source, for incarnations: a
// new value each time a process starts. Not for secrets.
uint64_t RandomId();

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_RANDOM_ID_H_
