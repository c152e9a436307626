# Unity builds (CMake's UNITY_BUILD) for the targets whose sources each spend most of their compile time on the same
# heavy headers: the CLI (CLI11 is header-only and emits its formatter and config parser in every file that adds
# options; nlohmann-json, fmt), the parameter server (ZeroMQ, cppzmq) and the unit tests (GoogleTest). Batches of 8
# files: on 2 cores (CI) the CLI then compiles in 45% of the time (2026-11-27, Zen 4, ASan build: 404 s of CPU in
# 34 files, 178 s in 5 batches). The core library's kernel files are not batched: their time is their own code.
# -DSTRATA_UNITY_BUILD=OFF compiles file by file (quicker rebuilds after touching one file).
option(STRATA_UNITY_BUILD "Compile the CLI, the parameter server and the unit tests in batches of 8 files" ON)

function(strata_unity_build target)
  if(STRATA_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()
