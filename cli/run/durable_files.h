#pragma once

#include <filesystem>

namespace strata::cli {

// Note [Checkpoint durability]: a rename is atomic for processes, not for a machine that loses power. The kernel
// may write a directory's new entries before the data of the files they name, so after a crash right after a
// publish the renamed-in checkpoint can hold empty or partial files while the previous one is already gone (the
// checksums would refuse it, but nothing would be left to resume from). So every file of a checkpoint is fsynced
// after it is written, each directory after its entries are complete, the checkpoint.tmp directory before the
// exchange, and RUN_DIR after it: when the exchange reaches the disk, everything it publishes is there. It costs
// one fsync per tensor file (milliseconds each on SSDs, nothing on tmpfs), paid once per --save interval.

// fsync(2) of a file's data and metadata; throws Error naming the file and the reason.
void syncFile(const std::filesystem::path& file);
// fsync(2) of a directory: makes the entries created, renamed or removed in it durable; throws Error naming it.
void syncDirectory(const std::filesystem::path& directory);

}  // namespace strata::cli
