#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "strata/train/checkpoint_store.h"

namespace strata::cli {

// A checkpoint directory of TensorProto files (the ONNX test suite's format, readable by any ONNX tool):
//   RUN_DIR/checkpoint/state.json             format, world size, the trainer's state (epochs, steps, loss scale)
//   RUN_DIR/checkpoint/rank<R>/manifest.json  rank R's entries: tensor keys -> files, text entries
//   RUN_DIR/checkpoint/rank<R>/t<N>.pb        the tensors, each named by its key
// Ranks write into RUN_DIR/checkpoint.tmp; the lead rank renames it into place once all have written
// (Note [Checkpoint commit] in trainer.cpp), so a crash while saving leaves the previous checkpoint intact.
class TensorProtoCheckpoints final : public CheckpointStore {
 public:
  TensorProtoCheckpoints(std::filesystem::path dir, int rank, int worldSize);

  bool exists() const override;
  std::unique_ptr<StateWriter> beginWrite() override;
  void commit() override;
  std::unique_ptr<StateReader> open() override;
  std::string describe() const override { return dir_.string(); }

 private:
  std::filesystem::path dir_;
  int rank_;
  int worldSize_;
};

}  // namespace strata::cli
