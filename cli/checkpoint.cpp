#include "checkpoint.h"

#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "run_outputs.h"
#include "strata/error.h"
#include "strata/loaders/tensor_proto_io.h"

namespace fs = std::filesystem;

namespace strata::cli {
namespace {

constexpr int kFormat = 2;

nlohmann::json readJson(const fs::path& file, const char* what) {
  std::ifstream in(file);
  if (!in) {
    fail("{}: cannot read the checkpoint's {}", file.string(), what);
  }
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail("{}: corrupt checkpoint {}: {}", file.string(), what, e.what());
  }
}

fs::path rankDir(const fs::path& dir, int rank) {
  return dir / fmt::format("rank{}", rank);
}

class Writer final : public StateWriter {
 public:
  explicit Writer(fs::path dir) : dir_(std::move(dir)) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  // The manifest goes last: a rank directory with a manifest is complete.
  ~Writer() override {
    try {
      writeJsonAtomically(dir_ / "manifest.json", {{"tensors", tensors_}, {"text", text_}});
    } catch (...) {  // the commit finds no manifest and says so
    }
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void putTensor(const std::string& key, const Tensor& tensor) override {
    STRATA_CHECK(!tensors_.contains(key), "checkpoint: tensor '{}' written twice", key);
    const std::string file = fmt::format("t{}.pb", tensors_.size());
    writeTensorProto(dir_ / file, tensor, key);
    tensors_[key] = file;
  }
  void putText(const std::string& key, std::string_view text) override { text_[key] = std::string(text); }

 private:
  fs::path dir_;
  nlohmann::json tensors_ = nlohmann::json::object();
  nlohmann::json text_ = nlohmann::json::object();
};

class Reader final : public StateReader {
 public:
  Reader(fs::path dir, int worldSize) : dir_(std::move(dir)) {
    for (int r = 0; r < worldSize; ++r) {
      const fs::path manifestFile = rankDir(dir_, r) / "manifest.json";
      const nlohmann::json manifest = readJson(manifestFile, "manifest");
      try {
        for (const auto& [key, file] : manifest.at("tensors").items()) {
          tensors_[key] = rankDir(dir_, r) / file.get<std::string>();
        }
        for (const auto& [key, value] : manifest.at("text").items()) {
          text_[key] = value.get<std::string>();
        }
      } catch (const nlohmann::json::exception& e) {
        fail("{}: corrupt checkpoint manifest: {}", manifestFile.string(), e.what());
      }
    }
  }

  bool has(const std::string& key) const override { return tensors_.contains(key) || text_.contains(key); }

  void getTensor(const std::string& key, Tensor destination) override {
    const auto it = tensors_.find(key);
    if (it == tensors_.end()) {
      fail("{}: the checkpoint has no tensor '{}' (written for another model or strategy?)", dir_.string(), key);
    }
    const NamedTensor loaded = readTensorProto(it->second);
    if (loaded.tensor.meta() != destination.meta()) {
      fail("{}: {} is {} in the checkpoint but {} in this run", it->second.string(), key,
           loaded.tensor.meta().toString(), destination.meta().toString());
    }
    destination.copyFrom(loaded.tensor);
  }

  std::string getText(const std::string& key) override {
    const auto it = text_.find(key);
    if (it == text_.end()) {
      fail("{}: the checkpoint has no entry '{}' (written for another model or strategy?)", dir_.string(), key);
    }
    return it->second;
  }

 private:
  fs::path dir_;
  std::map<std::string, fs::path> tensors_;
  std::map<std::string, std::string> text_;
};

}  // namespace

TensorProtoCheckpoints::TensorProtoCheckpoints(fs::path dir, int rank, int worldSize)
    : dir_(std::move(dir)), rank_(rank), worldSize_(worldSize) {}

bool TensorProtoCheckpoints::exists() const {
  return fs::exists(dir_ / "state.json");
}

std::unique_ptr<StateWriter> TensorProtoCheckpoints::beginWrite() {
  return std::make_unique<Writer>(rankDir(fs::path(dir_.string() + ".tmp"), rank_));
}

void TensorProtoCheckpoints::commit() {
  const fs::path temporary = dir_.string() + ".tmp";
  nlohmann::json state = {{"format", kFormat}, {"world_size", worldSize_}};
  for (int r = 0; r < worldSize_; ++r) {
    const fs::path manifestFile = rankDir(temporary, r) / "manifest.json";
    if (!fs::exists(manifestFile)) {
      fail("checkpoint {}: rank {} wrote no manifest; the previous checkpoint is kept", temporary.string(), r);
    }
    const nlohmann::json manifest = readJson(manifestFile, "manifest");
    if (manifest.at("text").contains("trainer")) {
      state["trainer"] = nlohmann::json::parse(manifest.at("text").at("trainer").get<std::string>());
    }
  }
  // Directories of ranks beyond this world size are left over from an older, larger run.
  for (const fs::directory_entry& entry : fs::directory_iterator(temporary)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank", 0) == 0 && std::stoi(name.substr(4)) >= worldSize_) {
      fs::remove_all(entry.path());
    }
  }
  writeJsonAtomically(temporary / "state.json", state);
  fs::remove_all(dir_);
  fs::rename(temporary, dir_);
}

std::unique_ptr<StateReader> TensorProtoCheckpoints::open() {
  const fs::path stateFile = dir_ / "state.json";
  if (!fs::exists(stateFile)) {
    fail("{}: no checkpoint to resume from (run with --save to write one)", stateFile.string());
  }
  const nlohmann::json state = readJson(stateFile, "state");
  if (state.value("format", 1) != kFormat) {
    fail("{}: checkpoint format {} was written by an older Strata; this one reads format {}", stateFile.string(),
         state.value("format", 1), kFormat);
  }
  return std::make_unique<Reader>(dir_, state.at("world_size").get<int>());
}

}  // namespace strata::cli
