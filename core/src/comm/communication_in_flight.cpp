#include "strata/comm/communication_in_flight.h"

#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace strata {
namespace {

std::atomic<int> inFlight{0};
std::atomic<long long> yields{0};

bool givingWayEnabled() {
  const char* value = std::getenv("STRATA_GIVE_WAY");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

}  // namespace

void beginCommunication() noexcept {
  inFlight.fetch_add(1, std::memory_order_relaxed);
}

void endCommunication() noexcept {
  inFlight.fetch_sub(1, std::memory_order_relaxed);
}

int communicationInFlight() noexcept {
  return inFlight.load(std::memory_order_relaxed);
}

bool giveWayToCommunication() noexcept {
  static const bool enabled = givingWayEnabled();
  if (!enabled || inFlight.load(std::memory_order_relaxed) == 0) {
    return false;
  }
  sched_yield();
  yields.fetch_add(1, std::memory_order_relaxed);
  return true;
}

long long communicationYields() noexcept {
  return yields.load(std::memory_order_relaxed);
}

}  // namespace strata
