#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace strata {

// Whole contents of a file, decompressed when it is gzipped (detected from the content, not the name). Throws
// Error naming the file when it cannot be opened or the gzip stream is corrupt or truncated.
std::vector<std::uint8_t> readDatasetFile(const std::filesystem::path& file);

// The first of `names` that exists in `directory`; otherwise throws Error naming `what`, the directory and every
// name tried (or that the directory itself is missing).
std::filesystem::path findDatasetFile(const std::filesystem::path& directory, const std::vector<std::string>& names,
                                      const std::string& what);

// Throws Error naming the directory when it does not exist or is not a directory.
void requireDatasetDirectory(const std::filesystem::path& directory, const std::string& what);

}  // namespace strata
