#pragma once

#include <chrono>
#include <string>

#include "strata/comm/store.h"

namespace strata {

struct RendezvousOptions {
  int rank = 0;
  int worldSize = 1;
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  // Where the store lives, for error messages ("127.0.0.1:29500").
  std::string where = "the store";
  // Keys are "<prefix>/joined" and "<prefix>/rank/<r>".
  std::string prefix = "rendezvous";
};

// Every rank announces itself (add("rendezvous/joined", 1), set("rendezvous/rank/<r>")) and waits for all others.
// On timeout throws Error naming the ranks that never arrived:
//   "rendezvous at 127.0.0.1:29500 timed out after 30 s: ranks 2, 3 of 4 never arrived".
void rendezvous(Store& store, const RendezvousOptions& options);

}  // namespace strata
