#pragma once

// Note [PS recovery]: with checkpoint_every=N a server writes its state (values, optimizer state, buffers, its
// version, and per worker the last sequence number applied and its clock) every N updates, atomically (a
// temporary file, fsync, rename). The launcher restarts a server that dies (RoleRequest::maxRestarts); the new
// process reloads the checkpoint and publishes its new endpoint. Each worker keeps the pushes the checkpoint does
// not hold yet (the reply's `durable` sequence says which), notices the new endpoint when a server falls silent,
// reconnects and resends them in order: pushes the checkpoint already holds are answered without being applied,
// the rest are applied again exactly as before, so in sync mode the run ends with the parameters of an
// uninterrupted one. The servers and summary.json report the restarts and the pushes replayed.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ps_keys.h"
#include "strata/tensor.h"

namespace strata::ps {

struct ServerCheckpoint {
  std::string jobId;  // STRATA_JOB_ID: a checkpoint of another job is never loaded
  FlatLayout layout;
  std::int64_t version = 0;
  std::int64_t restarts = 0;
  std::int64_t optimizerSteps = 0;
  std::vector<std::uint64_t> lastSequence;  // per worker
  std::vector<std::int64_t> clock;          // per worker
  std::vector<Tensor> values;               // per segment
  std::vector<Tensor> buffers;
  std::vector<Tensor> optimizerState;
  std::uint64_t tensorsOffset = 0;  // set by readServerCheckpointHeader: where the tensors start in the file
};

// Writes atomically to `path` (via path.tmp); throws Error naming the file.
void writeServerCheckpoint(const std::string& path, const ServerCheckpoint& checkpoint);
// nullopt when there is no file; throws Error naming the file when it is damaged. Tensors are read into the
// shapes of `into` (values, buffers and optimizer state allocated by the caller from the saved layout).
std::optional<ServerCheckpoint> readServerCheckpointHeader(const std::string& path);
void readServerCheckpointTensors(const std::string& path, ServerCheckpoint& into);

}  // namespace strata::ps
