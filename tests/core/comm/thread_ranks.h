#pragma once
// Multi-rank tests with ranks as threads (Gloo's base_test.h style): every rank has its own GlooProcessGroup over
// one shared InMemoryStore.

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "strata/comm/gloo_process_group.h"
#include "strata/comm/in_memory_store.h"

namespace strata::testing {

// Runs body(pg) on `world` ranks; an exception on a rank fails the test, naming the rank.
inline void runGlooRanks(int world, const std::function<void(GlooProcessGroup&)>& body,
                         const ProcessGroupOptions& options = {}, const GlooOptions& glooOptions = {}) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        GlooProcessGroup pg(store, r, world, options, glooOptions);
        body(pg);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
}

// A 1-D host tensor with t[i] = value(i).
inline Tensor filledTensor(DType dtype, std::int64_t n, const std::function<double(std::int64_t)>& value) {
  Tensor t = Tensor::empty(dtype, {n});
  for (std::int64_t i = 0; i < n; ++i) {
    if (dtype == DType::Float32) {
      t.data<float>()[i] = static_cast<float>(value(i));
    } else {
      t.data<double>()[i] = value(i);
    }
  }
  return t;
}

inline double valueAt(const Tensor& t, std::int64_t i) {
  return t.dtype() == DType::Float32 ? static_cast<double>(t.data<float>()[i]) : t.data<double>()[i];
}

}  // namespace strata::testing
