#pragma once

// Note [Standalone port]: a job that runs on one node only, given no --master-port and no MASTER_PORT, takes a free
// port for its store, as torchrun's --standalone does, so two such jobs on one machine do not both ask for 29500. A
// job over several nodes keeps the fixed default: every node's launcher must name the same port without talking to
// the others.

namespace strata::cli::detail {

// A TCP port that no socket on this machine holds now: the one the kernel gives a socket bound to port 0 of every
// IPv4 address, where rank 0's store will listen (TcpStoreServer binds INADDR_ANY). The socket is closed before
// this returns, so another process may take the port before the store does; torchrun lives with the same race.
// Throws Error when no socket can be bound.
int freeTcpPort();

}  // namespace strata::cli::detail
