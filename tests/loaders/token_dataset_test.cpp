// Token files and the language-model data set (Notes [Token files], [Text corpora], [Tokenizers]): windows and
// their shifted targets, splits, sharding across ranks, the errors bad data gets, and the tokenizers.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/error.h"
#include "strata/loaders/data_loader.h"
#include "strata/loaders/dataset.h"
#include "strata/loaders/text_corpus.h"
#include "strata/loaders/token_dataset.h"
#include "strata/loaders/token_file.h"
#include "strata/loaders/tokenizer.h"
#include "test_models.h"

namespace strata {
// A named namespace: the unity build compiles test files together, and their helpers must not meet.
namespace token_dataset_test {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TempDir;

using testing::errorOf;

std::vector<std::int64_t> iota(std::int64_t n, std::int64_t from = 0) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  std::iota(ids.begin(), ids.end(), from);
  return ids;
}

void writeRaw(const fs::path& path, const std::vector<std::uint16_t>& ids, std::size_t dropBytes = 0) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(ids.data()),
            static_cast<std::streamsize>(ids.size() * sizeof(std::uint16_t) - dropBytes));
}

TokenDatasetOptions optionsFor(const fs::path& file, std::int64_t seqLen) {
  TokenDatasetOptions o;
  o.file = file;
  o.seqLen = seqLen;
  return o;
}

TEST(TokenFileTest, HeaderedFilesRoundTripInTheNarrowestWidth) {
  TempDir dir;
  writeTokenFile(dir / "small.tokens", iota(1000), 1000);
  const TokenFile small(dir / "small.tokens");
  EXPECT_TRUE(small.hasHeader());
  EXPECT_EQ(small.tokenBytes(), 2);
  EXPECT_EQ(small.vocabulary(), 1000);
  EXPECT_EQ(small.size(), 1000);
  std::vector<std::int64_t> out(10);
  small.read(990, out, 1000);
  EXPECT_EQ(out, iota(10, 990));
  EXPECT_EQ(fs::file_size(dir / "small.tokens"), kTokenFileHeaderBytes + 2000);

  const std::vector<std::int64_t> wide{0, 70000, 50257, 1};
  writeTokenFile(dir / "wide.tokens", wide, 0);
  const TokenFile read(dir / "wide.tokens");
  EXPECT_EQ(read.tokenBytes(), 4);
  std::vector<std::int64_t> back(4);
  read.read(0, back, 0);
  EXPECT_EQ(back, wide);
}

TEST(TokenFileTest, RawUint16FilesAreNanoGptsLayout) {
  TempDir dir;
  std::vector<std::uint16_t> ids(100);
  std::iota(ids.begin(), ids.end(), std::uint16_t{60000});
  writeRaw(dir / "train.bin", ids);
  const TokenFile file(dir / "train.bin");
  EXPECT_FALSE(file.hasHeader());
  EXPECT_EQ(file.size(), 100);
  std::vector<std::int64_t> out(3);
  file.read(97, out, 0);
  EXPECT_EQ(out, (std::vector<std::int64_t>{60097, 60098, 60099}));
  const TokenFile asWide(dir / "train.bin", 4);  // 200 bytes: 50 uint32 ids
  EXPECT_EQ(asWide.size(), 50);
}

TEST(TokenFileTest, BadFilesAreNamedWithWhatIsWrong) {
  TempDir dir;
  EXPECT_THAT(errorOf([&] { TokenFile(dir / "missing.bin"); }),
              AllOf(HasSubstr("missing.bin"), HasSubstr("cannot open")));
  writeRaw(dir / "odd.bin", std::vector<std::uint16_t>(10), 1);
  EXPECT_THAT(errorOf([&] { TokenFile(dir / "odd.bin"); }),
              AllOf(HasSubstr("odd.bin"), HasSubstr("19 bytes is not a whole number of 2-byte ids")));
  writeTokenFile(dir / "cut.tokens", iota(100), 100);
  fs::resize_file(dir / "cut.tokens", kTokenFileHeaderBytes + 150);
  EXPECT_THAT(
      errorOf([&] { TokenFile(dir / "cut.tokens"); }),
      AllOf(HasSubstr("cut.tokens"), HasSubstr("header says 100 ids"), HasSubstr("150 bytes"), HasSubstr("truncated")));
  fs::resize_file(dir / "cut.tokens", 20);
  EXPECT_THAT(errorOf([&] { TokenFile(dir / "cut.tokens"); }), HasSubstr("less than its 32-byte header"));
}

TEST(TokenDatasetTest, WindowsAreTheInputAndTheNextTokenAtEveryPosition) {
  TempDir dir;
  writeTokenFile(dir / "c.tokens", iota(41), 64);  // (41 - 1) / 8 = 5 windows
  const TokenDataset data(optionsFor(dir / "c.tokens", 8));
  ASSERT_EQ(data.size(), 5);
  EXPECT_EQ(data.sampleShape(), (Shape{8}));
  EXPECT_EQ(data.targetShape(), (Shape{8}));
  EXPECT_EQ(data.sampleType(), DType::Int64);
  EXPECT_EQ(data.task(), Task::LanguageModel);
  EXPECT_EQ(data.numClasses(), 64);
  std::vector<std::int64_t> input(8);
  std::vector<std::int64_t> target(8);
  data.get(4, input.data(), target.data());
  EXPECT_EQ(input, iota(8, 32));
  EXPECT_EQ(target, iota(8, 33));
  EXPECT_THAT(errorOf([&] { data.get(5, input.data(), target.data()); }), HasSubstr("out of range"));
}

TEST(TokenDatasetTest, OneFileSplitsItsLastWindowsOffForValidation) {
  TempDir dir;
  writeTokenFile(dir / "c.tokens", iota(401), 1000);  // 100 windows of 4
  TokenDatasetOptions train = optionsFor(dir / "c.tokens", 4);
  train.end = 1.0 - kValidationShare;
  TokenDatasetOptions validation = optionsFor(dir / "c.tokens", 4);
  validation.begin = 1.0 - kValidationShare;
  const TokenDataset a(train);
  const TokenDataset b(validation);
  EXPECT_EQ(a.size(), 95);
  EXPECT_EQ(b.size(), 5);
  std::vector<std::int64_t> input(4);
  std::vector<std::int64_t> target(4);
  b.get(0, input.data(), target.data());
  EXPECT_EQ(input.front(), 380) << "validation starts where training ends";
  a.get(94, input.data(), target.data());
  EXPECT_EQ(target.back(), 380) << "the last training target is the first validation input";

  DatasetSpec spec;
  spec.kind = "tokens:" + (dir / "c.tokens").string();
  spec.seqLen = 4;
  spec.split = DatasetSplit::Test;
  EXPECT_EQ(openDataset(spec)->size(), 5);
  spec.split = DatasetSplit::Train;
  EXPECT_EQ(openDataset(spec)->size(), 95);
}

TEST(TokenDatasetTest, RanksShareWindowsWithoutOverlapDeterministicallyBySeed) {
  TempDir dir;
  writeTokenFile(dir / "c.tokens", iota(8 * 64 + 1), 8 * 64 + 1);
  auto data = std::make_shared<TokenDataset>(optionsFor(dir / "c.tokens", 8));
  std::set<std::int64_t> firstIds;
  std::vector<std::int64_t> rank0Epoch3;
  for (int rank = 0; rank < 2; ++rank) {
    DataLoader loader(
        data,
        DataLoaderOptions{.batchSize = 4, .rank = rank, .worldSize = 2, .seed = 7, .dropLast = true, .prefetch = 0});
    loader.startEpoch(3);
    while (std::optional<Batch> batch = loader.next()) {
      ASSERT_EQ(batch->inputs.dtype(), DType::Int64);
      ASSERT_EQ(batch->inputs.shape(), (Shape{4, 8}));
      ASSERT_EQ(batch->targets.shape(), (Shape{4, 8}));
      for (std::int64_t r = 0; r < 4; ++r) {
        const std::int64_t first = batch->inputs.data<std::int64_t>()[r * 8];
        EXPECT_TRUE(firstIds.insert(first).second) << "window from id " << first << " given twice";
        EXPECT_EQ(batch->targets.data<std::int64_t>()[r * 8 + 7], first + 8);
        if (rank == 0) {
          rank0Epoch3.push_back(first);
        }
      }
    }
  }
  EXPECT_EQ(firstIds.size(), 64U) << "every window once over the two ranks";
  DataLoader again(
      data, DataLoaderOptions{.batchSize = 4, .rank = 0, .worldSize = 2, .seed = 7, .dropLast = true, .prefetch = 0});
  again.startEpoch(3);
  std::vector<std::int64_t> replay;
  while (std::optional<Batch> batch = again.next()) {
    for (std::int64_t r = 0; r < 4; ++r) {
      replay.push_back(batch->inputs.data<std::int64_t>()[r * 8]);
    }
  }
  EXPECT_EQ(replay, rank0Epoch3) << "the same seed and epoch give the same windows (what a resume relies on)";
}

TEST(TokenDatasetTest, BadDataGetsAnErrorNamingTheFileAndTheOffset) {
  TempDir dir;
  std::vector<std::int64_t> ids = iota(33);
  ids[21] = 300;  // beyond a vocabulary of 256
  writeTokenFile(dir / "c.tokens", ids, 0);
  TokenDatasetOptions o = optionsFor(dir / "c.tokens", 8);
  o.vocabulary = 256;
  const TokenDataset data(o);
  std::vector<std::int64_t> input(8);
  std::vector<std::int64_t> target(8);
  EXPECT_NO_THROW(data.get(0, input.data(), target.data()));
  EXPECT_THAT(errorOf([&] { data.get(2, input.data(), target.data()); }),
              AllOf(HasSubstr("c.tokens"), HasSubstr("id 300 at id index 21"), HasSubstr("byte offset 74"),
                    HasSubstr("vocabulary of 256")));
  writeTokenFile(dir / "short.tokens", iota(5), 0);
  EXPECT_THAT(errorOf([&] { TokenDataset(optionsFor(dir / "short.tokens", 8)); }),
              AllOf(HasSubstr("short.tokens"), HasSubstr("5 ids make no window of 8 + 1")));
  writeTokenFile(dir / "big.tokens", iota(33), 50000);
  o.file = dir / "big.tokens";
  EXPECT_THAT(errorOf([&] { TokenDataset{o}; }),
              AllOf(HasSubstr("big.tokens"), HasSubstr("vocabulary of 50000"), HasSubstr("model has 256")));
}

TEST(TokenizerTest, BytesRoundTripAnyText) {
  const auto bytes = makeByteTokenizer();
  const std::string text = "In the beginning\n\xce\xb1\xce\xb2 \x01\xff";
  const std::vector<std::int64_t> ids = bytes->encode(text);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[3], 't');
  EXPECT_EQ(bytes->decode(ids), text);
  EXPECT_EQ(bytes->vocabulary(), 256);
  const std::vector<std::int64_t> bad{65, 256};
  EXPECT_THAT(errorOf([&] { bytes->decode(bad); }), HasSubstr("id 256 is not a byte"));
  EXPECT_EQ(tokenizerFromMetadata(tokenizerMetadata(*bytes))->kind(), "bytes");
  EXPECT_EQ(tokenizerFromMetadata({}), nullptr);
}

TEST(TokenizerTest, SpecsAreParsedOrRefusedSayingWhatTheyTake) {
  EXPECT_EQ(parseTokenizerSpec("bytes").kind, "bytes");
  const TokenizerSpec spec = parseTokenizerSpec("sentencepiece:500:unigram");
  EXPECT_EQ(spec.kind, "sentencepiece");
  EXPECT_EQ(spec.sentencePiece.vocabulary, 500);
  EXPECT_EQ(spec.sentencePiece.modelType, "unigram");
  EXPECT_EQ(parseTokenizerSpec("sentencepiece:300").sentencePiece.modelType, "bpe");
  for (const char* bad :
       {"words", "sentencepiece", "sentencepiece:x", "sentencepiece:8", "sentencepiece:64:wordpiece"}) {
    EXPECT_THAT(errorOf([&] { parseTokenizerSpec(bad); }), HasSubstr("expected bytes or sentencepiece:VOCAB")) << bad;
  }
}

// Debian's spm_* programs (Note [SentencePiece in a process of its own]): trained on a small corpus, the model
// encodes and decodes text with its line breaks, and survives the run directory and an export's metadata.
TEST(TokenizerTest, SentencePieceTrainsEncodesAndDecodesWithLineBreaks) {
  TempDir dir;
  {
    std::ofstream corpus(dir / "corpus.txt");
    for (int i = 0; i < 300; ++i) {
      corpus << "the quick brown fox jumps over the lazy dog " << i % 17 << "\nand the dog sleeps in the sun\n";
    }
  }
  const std::unique_ptr<Tokenizer> model = trainSentencePiece({dir / "corpus.txt"}, {.vocabulary = 320});
  EXPECT_EQ(model->kind(), "sentencepiece");
  EXPECT_EQ(model->vocabulary(), 320);
  const std::string text = "the lazy fox\nsleeps  in the sun\n\n over 7 \xce\xb1";
  const std::vector<std::int64_t> ids = model->encode(text);
  EXPECT_LT(ids.size(), text.size()) << "pieces longer than a byte";
  EXPECT_EQ(model->decode(ids), text);
  saveTokenizer(*model, dir / "run");
  EXPECT_EQ(readTokenizer(dir / "run")->decode(ids), text);
  EXPECT_EQ(tokenizerFromMetadata(tokenizerMetadata(*model))->encode(text), ids);
  EXPECT_THAT(errorOf([&] { readTokenizer(dir / "nowhere"); }), HasSubstr("no tokenizer.json"));
}

TEST(TextCorpusTest, ACorpusIsTokenizedOnceAndReused) {
  TempDir dir;
  fs::create_directories(dir / "books" / "b");
  std::ofstream(dir / "books" / "a.txt") << "first book";
  std::ofstream(dir / "books" / "b" / "c.txt") << "second";
  const TextCorpusOptions options{.source = (dir / "books").string(), .cacheDir = dir / "cache", .tokenizer = {}};
  const TextCorpus corpus = prepareTextCorpus(options);
  const TokenFile file(corpus.tokens);
  EXPECT_EQ(file.size(), 17) << "10 + a line break + 6: the files in path order, joined";
  std::vector<std::int64_t> ids(17);
  file.read(0, ids, 256);
  EXPECT_EQ(corpus.tokenizer->decode(ids), "first book\nsecond");
  EXPECT_THAT(corpus.description, HasSubstr("2 files"));
  const auto written = fs::last_write_time(corpus.tokens);
  EXPECT_EQ(prepareTextCorpus(options).tokens, corpus.tokens);
  EXPECT_EQ(fs::last_write_time(corpus.tokens), written) << "the cached token file is reused, not rewritten";
  std::ofstream(dir / "books" / "b" / "c.txt", std::ios::app) << " changed";
  EXPECT_NE(prepareTextCorpus(options).tokens, corpus.tokens) << "a changed corpus is tokenized again";

  EXPECT_THAT(errorOf([&] {
                prepareTextCorpus({.source = (dir / "none").string(), .cacheDir = dir / "cache", .tokenizer = {}});
              }),
              AllOf(HasSubstr("none"), HasSubstr("no such file or directory")));
  fs::create_directories(dir / "empty");
  EXPECT_THAT(errorOf([&] {
                prepareTextCorpus({.source = (dir / "empty").string(), .cacheDir = dir / "cache", .tokenizer = {}});
              }),
              HasSubstr("holds no files"));
}

// The built-in corpus from Debian's bible-kjv (scripts/install-deps.sh installs it).
TEST(TextCorpusTest, TheDefaultCorpusIsRealEnglishProse) {
  TempDir dir;
  const TextCorpus corpus = prepareTextCorpus({.source = "", .cacheDir = dir.path(), .tokenizer = {}});
  const TokenFile file(corpus.tokens);
  EXPECT_GT(file.size(), 4'000'000);
  std::vector<std::int64_t> ids(200);
  file.read(0, ids, 256);
  EXPECT_THAT(corpus.tokenizer->decode(ids), HasSubstr("In the beginning God created the heaven and the earth."));
  EXPECT_THAT(corpus.description, HasSubstr("King James"));
}

}  // namespace token_dataset_test
}  // namespace strata
