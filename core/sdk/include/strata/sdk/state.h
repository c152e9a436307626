#pragma once

// Checkpoint state a strategy writes and reads through the trainer (Strategy::saveState / loadState). Keys are
// names within the checkpoint, unique across ranks (a sharded strategy puts its rank in them: "rank3/shard_0").

#include <string>
#include <string_view>

#include "strata/tensor.h"

namespace strata {

class StateWriter {
 public:
  virtual ~StateWriter() = default;
  virtual void putTensor(const std::string& key, const Tensor& tensor) = 0;
  virtual void putText(const std::string& key, std::string_view text) = 0;
};

class StateReader {
 public:
  virtual ~StateReader() = default;
  virtual bool has(const std::string& key) const = 0;
  // Fills `destination` (any device); an error names the file and the key when the dtype or shape differ.
  virtual void getTensor(const std::string& key, Tensor destination) = 0;
  virtual std::string getText(const std::string& key) = 0;
};

}  // namespace strata
