#include "common/random_id.h"

#include <random>

namespace trainsup {

uint64_t RandomId() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace trainsup
