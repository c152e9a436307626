#pragma once

// The launcher's supervisor: starts this node's ranks and role processes (child_process.h), passes on their output
// (child_output.h), restarts or lets depart what the strategy allows, and stops them all when one fails or the
// launcher is interrupted.

#include <string>
#include <vector>

#include "launch/launcher.h"

namespace strata::cli::detail {

// Starts the local ranks as copies of `args` and the roles placed on this node, and supervises them until all have
// exited, as launchIfNeeded (launcher.h) describes. Returns 0 when every rank succeeded; throws Error naming the rank
// or role that failed. `options` and `roles` are already checked, and options.masterPort is the store's.
int superviseRanks(const LaunchOptions& options, const RoleLaunch& roles, std::vector<std::string> args);

}  // namespace strata::cli::detail
