#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "strata/loaders/tokenizer.h"

namespace strata {

// The built-in default text corpus: the King James Bible (1611; public domain) from Debian's bible-kjv-text package,
// 4.3 MB of English prose, written out as plain text by its `bible` program.
inline constexpr const char* kDefaultCorpusName = "the King James Bible (Debian's bible-kjv-text, public domain)";

struct TextCorpusOptions {
  std::string source;              // a text file or a directory of them; empty: the default corpus
  std::filesystem::path cacheDir;  // where the tokenized corpus and its tokenizer are kept
  TokenizerSpec tokenizer;
};

struct TextCorpus {
  std::filesystem::path tokens;          // a token file (Note [Token files])
  std::shared_ptr<Tokenizer> tokenizer;  // what made it
  std::string description;               // e.g. "text /data/books (12 files, 5.1 MB)"
};

// Note [Text corpora]: a corpus is tokenized once into a token file in `cacheDir`, named by a hash of its files
// (paths, sizes and modification times) and the tokenizer spec, beside a copy of the tokenizer; a later run or rank
// with the same corpus reuses both. A directory's regular files are read in path order, recursively, and joined by
// line breaks. Files are written to temporary names and renamed, so ranks that prepare the same corpus at once
// leave one whole copy. Throws Error naming the file for a missing or unreadable corpus, an empty one, or a
// tokenizer that fails.
TextCorpus prepareTextCorpus(const TextCorpusOptions& options);

}  // namespace strata
