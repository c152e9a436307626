#pragma once

#include <memory>

#include "strata/sdk/state.h"

namespace strata {

// Where checkpoints live (`strata train` keeps TensorProto files in RUN_DIR/checkpoint). Every rank writes its own
// entries; commit() publishes the checkpoint atomically once every rank has written (a crash while saving leaves
// the previous checkpoint intact).
class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  virtual bool exists() const = 0;
  // A writer for this rank's entries of a new checkpoint.
  virtual std::unique_ptr<StateWriter> beginWrite() = 0;
  // Called on every rank after all ranks have finished writing (the trainer synchronises them in between); the
  // lead rank publishes the new checkpoint.
  virtual void commit() = 0;
  // A reader over every rank's entries of the published checkpoint; throws Error when there is none.
  virtual std::unique_ptr<StateReader> open() = 0;
  // Where it is, for messages.
  virtual std::string describe() const = 0;
};

}  // namespace strata
