#include "strata/loaders/tokenizer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "strata/error.h"

namespace strata {
namespace fs = std::filesystem;
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::int64_t vocabulary() const override { return 256; }
  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<std::int64_t> ids(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
      ids[i] = static_cast<unsigned char>(text[i]);
    }
    return ids;
  }
  std::string decode(std::span<const std::int64_t> ids) const override {
    std::string text(ids.size(), '\0');
    for (std::size_t i = 0; i < ids.size(); ++i) {
      STRATA_CHECK(ids[i] >= 0 && ids[i] < 256, "byte tokenizer: id {} is not a byte (0 to 255)", ids[i]);
      text[i] = static_cast<char>(ids[i]);
    }
    return text;
  }
  std::string kind() const override { return "bytes"; }
  std::string serialized() const override { return {}; }
  std::string description() const override { return "bytes (256 ids, one per byte of UTF-8 text)"; }
};

// Note [SentencePiece in a process of its own]: Debian's libsentencepiece carries its own copy of protobuf, whose
// symbols clash with the system protobuf that ONNX uses (a process linking both crashes in protobuf's static
// initialisers). Strata therefore runs Debian's spm_train, spm_encode and spm_decode, with files in a temporary
// directory; a model is kept as its serialized bytes.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "strata-spm-XXXXXX").string();
    STRATA_CHECK(::mkdtemp(pattern.data()) != nullptr, "SentencePiece: cannot make a temporary directory: {}",
                 std::strerror(errno));
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

std::string readWhole(const fs::path& path);

void writeWhole(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  STRATA_CHECK(out.good(), "{}: cannot write", path.string());
}

// Runs one of SentencePiece's programs; throws Error with its own words when it fails or is missing.
void runSpm(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<char*> argv;
  for (const std::string& arg : args) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    fail("SentencePiece: cannot run {}: {} (Debian's sentencepiece package provides it: apt-get install sentencepiece)",
         args[0], std::strerror(spawned));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string said = readWhole(log);
    if (said.size() > 2000) {
      said = "..." + said.substr(said.size() - 2000);
    }
    fail("SentencePiece: {} failed ({}): {}", args[0],
         WIFEXITED(status) ? fmt::format("status {}", WEXITSTATUS(status)) : "killed", said);
  }
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::string serialized) : serialized_(std::move(serialized)) {
    ScratchDir scratch;
    writeWhole(scratch / "m.model", serialized_);
    runSpm(
        {"spm_export_vocab", "--model=" + (scratch / "m.model").string(), "--output=" + (scratch / "vocab").string()},
        scratch / "log");
    std::ifstream vocab(scratch / "vocab");
    std::string line;
    while (std::getline(vocab, line)) {
      const std::string piece = line.substr(0, line.find('\t'));
      if (piece == "<0x0A>") {
        newline_ = static_cast<std::int64_t>(pieces_);
      }
      ++pieces_;
    }
    STRATA_CHECK(pieces_ > 0, "SentencePiece: the tokenizer model lists no pieces");
    STRATA_CHECK(newline_ >= 0,
                 "SentencePiece: the tokenizer model has no byte piece for a line break (<0x0A>); "
                 "Strata trains its models with byte fallback");
  }
  std::int64_t vocabulary() const override { return pieces_; }
  // SentencePiece encodes line by line; the line breaks between lines become the byte piece <0x0A>.
  std::vector<std::int64_t> encode(std::string_view text) const override {
    ScratchDir scratch;
    writeWhole(scratch / "m.model", serialized_);
    writeWhole(scratch / "in", text);
    runSpm({"spm_encode", "--model=" + (scratch / "m.model").string(), "--output_format=id",
            "--input=" + (scratch / "in").string(), "--output=" + (scratch / "out").string()},
           scratch / "log");
    std::vector<std::int64_t> ids;
    std::ifstream out(scratch / "out");
    std::string line;
    std::size_t lines = 0;
    const std::size_t breaks = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
    while (std::getline(out, line)) {
      if (lines++ > 0) {
        ids.push_back(newline_);
      }
      std::istringstream numbers(line);
      std::int64_t id = 0;
      while (numbers >> id) {
        ids.push_back(id);
      }
    }
    // A text ending in a line break: spm_encode wrote one line per line, so the last break is still to add.
    for (std::size_t i = lines > 0 ? lines - 1 : 0; i < breaks; ++i) {
      ids.push_back(newline_);
    }
    return ids;
  }
  std::string decode(std::span<const std::int64_t> ids) const override {
    ScratchDir scratch;
    writeWhole(scratch / "m.model", serialized_);
    std::string numbers;
    for (const std::int64_t id : ids) {
      STRATA_CHECK(id >= 0 && id < pieces_, "SentencePiece: id {} is outside its {} pieces", id, pieces_);
      numbers += fmt::format("{} ", id);
    }
    numbers += "\n";
    writeWhole(scratch / "in", numbers);
    runSpm({"spm_decode", "--model=" + (scratch / "m.model").string(), "--input_format=id",
            "--input=" + (scratch / "in").string(), "--output=" + (scratch / "out").string()},
           scratch / "log");
    std::string text = readWhole(scratch / "out");
    if (!text.empty() && text.back() == '\n') {
      text.pop_back();  // the line spm_decode ends its output with
    }
    return text;
  }
  std::string kind() const override { return "sentencepiece"; }
  std::string serialized() const override { return serialized_; }
  std::string description() const override { return fmt::format("sentencepiece ({} pieces)", pieces_); }

 private:
  std::string serialized_;
  std::int64_t pieces_ = 0;
  std::int64_t newline_ = -1;
};

std::string readWhole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in.is_open(), "{}: cannot open", path.string());
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return std::move(bytes).str();
}

constexpr std::string_view kBase64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string toBase64(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t chunk = 0;
    for (std::size_t k = 0; k < 3; ++k) {
      chunk = (chunk << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0U);
    }
    for (std::size_t k = 0; k < 4; ++k) {
      out += k <= n ? kBase64[(chunk >> (18 - 6 * k)) & 63U] : '=';
    }
  }
  return out;
}

std::string fromBase64(std::string_view text) {
  std::string out;
  std::uint32_t chunk = 0;
  int bits = 0;
  for (const char c : text) {
    if (c == '=') {
      break;
    }
    const std::size_t value = kBase64.find(c);
    STRATA_CHECK(value != std::string_view::npos, "tokenizer metadata: '{}' is not base64", c);
    chunk = (chunk << 6) | static_cast<std::uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((chunk >> bits) & 0xffU);
    }
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> tokenizerMetadata(const Tokenizer& tokenizer) {
  std::map<std::string, std::string> metadata{{"strata.tokenizer", tokenizer.kind()}};
  if (!tokenizer.serialized().empty()) {
    metadata["strata.tokenizer.model"] = toBase64(tokenizer.serialized());
  }
  return metadata;
}

std::unique_ptr<Tokenizer> tokenizerFromMetadata(const std::map<std::string, std::string>& metadata) {
  const auto kind = metadata.find("strata.tokenizer");
  if (kind == metadata.end()) {
    return nullptr;
  }
  const auto model = metadata.find("strata.tokenizer.model");
  return loadTokenizer(kind->second, model == metadata.end() ? std::string() : fromBase64(model->second));
}

std::unique_ptr<Tokenizer> makeByteTokenizer() {
  return std::make_unique<ByteTokenizer>();
}

std::string TokenizerSpec::toString() const {
  return kind == "bytes" ? kind : fmt::format("sentencepiece:{}:{}", sentencePiece.vocabulary, sentencePiece.modelType);
}

TokenizerSpec parseTokenizerSpec(std::string_view text) {
  TokenizerSpec spec;
  const auto bad = [&] {
    fail(
        "--tokenizer {}: expected bytes or sentencepiece:VOCAB[:bpe|unigram] (VOCAB at least 16), e.g. "
        "sentencepiece:8000",
        text);
  };
  if (text == "bytes") {
    return spec;
  }
  constexpr std::string_view kPrefix = "sentencepiece:";
  if (!text.starts_with(kPrefix)) {
    bad();
  }
  std::string_view rest = text.substr(kPrefix.size());
  const std::size_t colon = rest.find(':');
  const std::string_view number = rest.substr(0, colon);
  std::int64_t vocabulary = 0;
  const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), vocabulary);
  if (error != std::errc() || end != number.data() + number.size() || vocabulary < 16) {
    bad();
  }
  spec.kind = "sentencepiece";
  spec.sentencePiece.vocabulary = vocabulary;
  if (colon != std::string_view::npos) {
    spec.sentencePiece.modelType = std::string(rest.substr(colon + 1));
    if (spec.sentencePiece.modelType != "bpe" && spec.sentencePiece.modelType != "unigram") {
      bad();
    }
  }
  return spec;
}

std::unique_ptr<Tokenizer> trainSentencePiece(const std::vector<fs::path>& files, const SentencePieceOptions& options) {
  STRATA_CHECK(!files.empty(), "SentencePiece: no text to train on");
  ScratchDir scratch;
  std::string inputs;
  for (const fs::path& file : files) {
    inputs += (inputs.empty() ? "" : ",") + file.string();
  }
  // Every character of the corpus is kept (character_coverage 1, bytes for the rest): the corpus, not a language,
  // decides the pieces. The text round-trips exactly: no Unicode normalisation, no collapsed spaces, no space added
  // before each line (lines are encoded one by one and joined by line-break pieces). One thread: the result does not
  // depend on scheduling.
  runSpm({"spm_train", "--input=" + inputs, "--model_prefix=" + (scratch / "m").string(),
          "--vocab_size=" + std::to_string(options.vocabulary), "--model_type=" + options.modelType,
          "--character_coverage=1.0", "--byte_fallback=true", "--normalization_rule_name=identity",
          "--remove_extra_whitespaces=false", "--add_dummy_prefix=false", "--num_threads=1", "--minloglevel=1"},
         scratch / "log");
  return std::make_unique<SentencePieceTokenizer>(readWhole(scratch / "m.model"));
}

std::unique_ptr<Tokenizer> loadTokenizer(std::string_view kind, std::string_view serialized) {
  if (kind == "bytes") {
    return makeByteTokenizer();
  }
  if (kind == "sentencepiece") {
    return std::make_unique<SentencePieceTokenizer>(std::string(serialized));
  }
  fail("unknown tokenizer kind '{}': expected bytes or sentencepiece", kind);
}

void saveTokenizer(const Tokenizer& tokenizer, const fs::path& dir) {
  fs::create_directories(dir);
  nlohmann::json description = {{"kind", tokenizer.kind()}, {"vocabulary", tokenizer.vocabulary()}};
  if (tokenizer.kind() == "sentencepiece") {
    description["model"] = "tokenizer.model";
    std::ofstream model(dir / "tokenizer.model", std::ios::binary | std::ios::trunc);
    const std::string bytes = tokenizer.serialized();
    model.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    STRATA_CHECK(model.good(), "{}: cannot write the tokenizer model", (dir / "tokenizer.model").string());
  }
  std::ofstream out(dir / "tokenizer.json", std::ios::trunc);
  out << description.dump(2) << "\n";
  STRATA_CHECK(out.good(), "{}: cannot write", (dir / "tokenizer.json").string());
}

std::unique_ptr<Tokenizer> readTokenizer(const fs::path& dir) {
  const fs::path file = dir / "tokenizer.json";
  STRATA_CHECK(fs::exists(file), "{}: no tokenizer.json (a run trained on text data keeps its tokenizer there)",
               dir.string());
  nlohmann::json description;
  try {
    description = nlohmann::json::parse(readWhole(file));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not a tokenizer description: {}", file.string(), e.what());
  }
  const std::string kind = description.value("kind", "");
  const std::string serialized =
      kind == "sentencepiece" ? readWhole(dir / description.value("model", "tokenizer.model")) : std::string();
  return loadTokenizer(kind, serialized);
}

}  // namespace strata
