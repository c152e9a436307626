#pragma once

// Scratch files for fuzz targets whose code under test reads files (the importer, the dataset readers): one
// directory per process under $TMPDIR (or /tmp), removed at exit, rewritten by every input.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace strata::fuzz {

// The process's scratch directory (created on first use, emptied of nothing: callers overwrite their own files).
const std::filesystem::path& scratchDirectory();

// Writes `size` bytes to scratchDirectory()/name and returns the path.
std::filesystem::path writeScratchFile(const std::string& name, const std::uint8_t* data, std::size_t size);

}  // namespace strata::fuzz
