#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// Text to token ids and back, for language models.
// Note [Tokenizers]: `bytes` (the default) maps each byte of the UTF-8 text to its value (a vocabulary of 256, no
// training, any text); `sentencepiece` is a BPE or unigram model trained on the run's corpus with Debian's
// SentencePiece library. A run keeps its tokenizer in its directory (tokenizer.json, and tokenizer.model for
// SentencePiece) and an exported model carries it in its metadata, so generation decodes with the very tokenizer
// the model was trained with.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::int64_t vocabulary() const = 0;
  virtual std::vector<std::int64_t> encode(std::string_view text) const = 0;
  // Throws Error for an id outside the vocabulary.
  virtual std::string decode(std::span<const std::int64_t> ids) const = 0;
  // "bytes" or "sentencepiece".
  virtual std::string kind() const = 0;
  // What reloads it besides its kind: SentencePiece's serialized model; empty for bytes.
  virtual std::string serialized() const = 0;
  virtual std::string description() const = 0;
};

std::unique_ptr<Tokenizer> makeByteTokenizer();

struct SentencePieceOptions {
  std::int64_t vocabulary = 8000;
  std::string modelType = "bpe";  // bpe | unigram
};

// Parses --tokenizer: "bytes" or "sentencepiece:VOCAB[:bpe|unigram]". Throws Error saying what it takes.
struct TokenizerSpec {
  std::string kind = "bytes";
  SentencePieceOptions sentencePiece;
  std::string toString() const;
};
TokenizerSpec parseTokenizerSpec(std::string_view text);

// Trains SentencePiece on the text files (each line a sentence). Throws Error with SentencePiece's reason.
std::unique_ptr<Tokenizer> trainSentencePiece(const std::vector<std::filesystem::path>& files,
                                              const SentencePieceOptions& options);

// The tokenizer a kind and its serialized form describe (what kind() and serialized() gave).
std::unique_ptr<Tokenizer> loadTokenizer(std::string_view kind, std::string_view serialized);

// A run directory's tokenizer files (Note [Tokenizers]): writes `dir`/tokenizer.json (and tokenizer.model), and
// reads them back; reading throws Error naming the directory when they are missing or damaged.
void saveTokenizer(const Tokenizer& tokenizer, const std::filesystem::path& dir);
std::unique_ptr<Tokenizer> readTokenizer(const std::filesystem::path& dir);

// The tokenizer as ONNX metadata_props entries ("strata.tokenizer" its kind, "strata.tokenizer.model" its
// serialized model in base64), for an exported model, and back; nullptr when the metadata names none.
std::map<std::string, std::string> tokenizerMetadata(const Tokenizer& tokenizer);
std::unique_ptr<Tokenizer> tokenizerFromMetadata(const std::map<std::string, std::string>& metadata);

}  // namespace strata
