#include "strata/loaders/text_corpus.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "strata/error.h"
#include "strata/loaders/token_file.h"

namespace strata {
namespace fs = std::filesystem;
namespace {

// The default corpus, written by Debian's `bible` program (bible-kjv) into `dir` once.
fs::path defaultCorpus(const fs::path& dir) {
  const fs::path text = dir / "kjv.txt";
  if (fs::exists(text)) {
    return text;
  }
  const fs::path temporary = text.string() + ".tmp" + std::to_string(::getpid());
  const std::string command = fmt::format("bible -l80 gen1:1-rev22:21 > '{}' 2>&1", temporary.string());
  const int status = std::system(command.c_str());
  std::error_code ec;
  if (status != 0 || fs::file_size(temporary, ec) < 1'000'000) {
    fs::remove(temporary, ec);
    fail(
        "the default text corpus, {}, needs Debian's bible-kjv package (its `bible` program failed with status {}); "
        "install it (apt-get install bible-kjv) or give --data text:FILE",
        kDefaultCorpusName, status);
  }
  fs::rename(temporary, text, ec);
  STRATA_CHECK(!ec, "{}: cannot move the default corpus into place: {}", text.string(), ec.message());
  return text;
}

std::vector<fs::path> corpusFiles(const fs::path& source) {
  std::error_code ec;
  STRATA_CHECK(fs::exists(source, ec), "text corpus {}: no such file or directory", source.string());
  if (!fs::is_directory(source, ec)) {
    return {source};
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(source, ec)) {
    if (entry.is_regular_file()) {
      files.push_back(entry.path());
    }
  }
  STRATA_CHECK(!ec, "text corpus {}: cannot list: {}", source.string(), ec.message());
  std::sort(files.begin(), files.end());
  STRATA_CHECK(!files.empty(), "text corpus {}: the directory holds no files", source.string());
  return files;
}

std::string readText(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  STRATA_CHECK(in.is_open(), "text corpus {}: cannot open", file.string());
  std::ostringstream bytes;
  bytes << in.rdbuf();
  STRATA_CHECK(!in.bad(), "text corpus {}: cannot read", file.string());
  return std::move(bytes).str();
}

std::string cacheKey(const std::vector<fs::path>& files, const std::string& tokenizer) {
  std::string identity = tokenizer;
  for (const fs::path& file : files) {
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    const auto time = fs::last_write_time(file, ec).time_since_epoch().count();
    identity += fmt::format("|{}|{}|{}", fs::absolute(file).string(), size, time);
  }
  return fmt::format("{:016x}", std::hash<std::string>{}(identity));
}

}  // namespace

TextCorpus prepareTextCorpus(const TextCorpusOptions& options) {
  fs::create_directories(options.cacheDir);
  const bool builtIn = options.source.empty();
  const std::vector<fs::path> files =
      builtIn ? std::vector{defaultCorpus(options.cacheDir)} : corpusFiles(options.source);
  std::uintmax_t bytes = 0;
  for (const fs::path& file : files) {
    bytes += fs::file_size(file);
  }
  STRATA_CHECK(bytes > 0, "text corpus {}: empty", builtIn ? files[0].string() : options.source);
  const std::string key = cacheKey(files, options.tokenizer.toString());
  const fs::path tokens = options.cacheDir / fmt::format("text-{}.tokens", key);
  const fs::path tokenizerDir = options.cacheDir / fmt::format("text-{}.tokenizer", key);
  TextCorpus corpus;
  corpus.tokens = tokens;
  corpus.description = builtIn
                           ? fmt::format("text: {}, {:.1f} MB", kDefaultCorpusName, static_cast<double>(bytes) / 1e6)
                           : fmt::format("text {} ({} file{}, {:.1f} MB)", options.source, files.size(),
                                         files.size() == 1 ? "" : "s", static_cast<double>(bytes) / 1e6);
  if (fs::exists(tokens) && fs::exists(tokenizerDir / "tokenizer.json")) {
    corpus.tokenizer = readTokenizer(tokenizerDir);
    return corpus;
  }
  corpus.tokenizer = options.tokenizer.kind == "bytes"
                         ? std::shared_ptr<Tokenizer>(makeByteTokenizer())
                         : std::shared_ptr<Tokenizer>(trainSentencePiece(files, options.tokenizer.sentencePiece));
  std::vector<std::int64_t> ids;
  for (std::size_t f = 0; f < files.size(); ++f) {
    const std::string text = readText(files[f]) + (f + 1 < files.size() ? "\n" : "");
    const std::vector<std::int64_t> part = corpus.tokenizer->encode(text);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  // The tokenizer first: a token file present means its tokenizer is too.
  const fs::path staging = tokenizerDir.string() + ".tmp" + std::to_string(::getpid());
  saveTokenizer(*corpus.tokenizer, staging);
  std::error_code ec;
  if (!fs::exists(tokenizerDir / "tokenizer.json")) {
    fs::remove_all(tokenizerDir, ec);  // a damaged copy
    fs::rename(staging, tokenizerDir, ec);
    STRATA_CHECK(!ec || fs::exists(tokenizerDir / "tokenizer.json"), "{}: cannot move the tokenizer into place: {}",
                 tokenizerDir.string(), ec.message());
  }
  fs::remove_all(staging, ec);  // another process placed its copy first
  writeTokenFile(tokens, ids, corpus.tokenizer->vocabulary());
  return corpus;
}

}  // namespace strata
