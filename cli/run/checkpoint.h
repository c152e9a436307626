#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "strata/train/checkpoint_store.h"

namespace strata::cli {

// A checkpoint directory of TensorProto files (the ONNX test suite's format, readable by any ONNX tool):
//   RUN_DIR/checkpoint/state.json             format, world size, the trainer's state (epochs, steps, loss scale)
//   RUN_DIR/checkpoint/rank<R>/manifest.json  rank R's entries: tensor keys -> {file, bytes, crc32}, text entries
//   RUN_DIR/checkpoint/rank<R>/t<N>.pb        the tensors, each named by its key
// Ranks write into RUN_DIR/checkpoint.tmp; the lead rank swaps it into place atomically once all have written
// (Note [Checkpoint commit] in trainer.cpp, Note [Checkpoint publish] in checkpoint.cpp), so a crash or a full disk
// while saving leaves the previous checkpoint intact. Loading checks each file's size and CRC32 first
// (Note [Checkpoint checksums]) and refuses manifests without them.
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
  int writes_ = 0;  // checkpoints begun by this process (Note [Checkpoint test hook])
};

}  // namespace strata::cli
