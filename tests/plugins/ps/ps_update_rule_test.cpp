// The parameter server's update rule without sockets (plugins/ps/ps_update_rule.h): Note [PS modes], Note [Async
// learning rate], DC-ASGD and the releases of held answers.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ps_test_support.h"  // bytesOf; no server or socket is used here
#include "ps_update_rule.h"
#include "strata/optim/optimizer.h"

namespace strata::ps {
namespace {

using Options = std::map<std::string, std::string>;

// One group of 4 float32 parameters (values 1, 2, 3, 4) and one buffer of 2, on one server holding the buffers;
// plain SGD.
class Rule {
 public:
  explicit Rule(const std::map<std::string, std::string>& options, int workers = 2, bool keepPrevious = false)
      : rule_(parsePsOptions(options), 0, workers, true, keepPrevious,
              [this](const std::string& json) { trace.push_back(json); }) {
    FlatLayout layout;
    layout.groups.push_back({DType::Float32, 4});
    layout.buffers.push_back({DType::Float32, 2});
    rule_.allocate(layout, partitionKeys(layout, 1).at(0), [](std::vector<ParameterSlice> slices) {
      return std::make_unique<Optimizer>(std::move(slices), OptimizerOptions{});
    });
    assignBytes({testing::bytesOf(std::vector<float>{1, 2, 3, 4}), testing::bytesOf(std::vector<float>{0, 0})});
  }
  UpdateRule& operator*() { return rule_; }
  UpdateRule* operator->() { return &rule_; }

  // Worker w's push of gradient g everywhere and buffer values b, computed on `modelVersion`, at lr 0.5.
  std::vector<Release> push(int w, float g, std::int64_t modelVersion = 0, std::vector<float> b = {0, 0}) {
    Header request;
    request.worker = w;
    request.lr = 0.5;
    request.modelVersion = modelVersion;
    held_ = {testing::bytesOf(std::vector<float>(4, g)), testing::bytesOf(b)};
    return rule_.push(w, request, frames(held_));
  }
  std::vector<float> values() const { return floats(rule_.values().at(0)); }
  std::vector<float> buffer() const { return floats(rule_.buffers().at(0)); }

  std::vector<std::string> trace;

 private:
  static std::vector<Frame> frames(const std::vector<std::vector<std::byte>>& data) {
    std::vector<Frame> spans;
    for (const auto& d : data) {
      spans.emplace_back(d.data(), d.size());
    }
    return spans;
  }
  static std::vector<float> floats(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }
  void assignBytes(const std::vector<std::vector<std::byte>>& data) { rule_.assign(frames(data)); }

  UpdateRule rule_;
  std::vector<std::vector<std::byte>> held_;
};

std::vector<int> workersOf(const std::vector<Release>& due) {
  std::vector<int> workers;
  for (const Release& r : due) {
    workers.push_back(r.worker);
  }
  return workers;
}

TEST(PsUpdateRuleTest, SyncAnswersOnlyAFullRoundWithOneUpdateFromTheMean) {
  Rule rule(Options{{"mode", "sync"}});
  EXPECT_TRUE(rule.push(0, 1.0F, 0, {2, 4}).empty());
  EXPECT_EQ(rule->version(), 0);
  EXPECT_TRUE(rule->worker(0).waiting);
  EXPECT_TRUE(rule->markIdle(1).empty()) << "a half-gathered round is never answered";
  EXPECT_EQ(workersOf(rule.push(1, 3.0F, 0, {4, 8})), (std::vector<int>{0, 1}));
  EXPECT_EQ(rule->version(), 1);
  // SGD at lr 0.5 on the mean gradient 2; buffers averaged.
  EXPECT_EQ(rule.values(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(rule.buffer(), (std::vector<float>{3, 6}));
  EXPECT_EQ(rule->worker(0).clock, 1);
  EXPECT_FALSE(rule->worker(1).waiting);
  EXPECT_TRUE(rule.push(0, 1.0F).empty()) << "the second round starts empty";
  EXPECT_THROW(rule.push(0, 1.0F), Error) << "a second push while its first is unanswered";
}

TEST(PsUpdateRuleTest, SyncKeepsTheValuesBeforeTheLastUpdateForARejoiningWorker) {
  Rule rule(Options{{"mode", "sync"}}, 1, /*keepPrevious=*/true);
  EXPECT_FALSE(rule->hasPrevious());
  rule.push(0, 1.0F);
  ASSERT_TRUE(rule->hasPrevious());
  const Tensor& previous = rule->previousValues().at(0);
  EXPECT_EQ(std::vector<float>(previous.data<float>(), previous.data<float>() + 4), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(rule.values(), (std::vector<float>{0.5F, 1.5F, 2.5F, 3.5F}));
}

TEST(PsUpdateRuleTest, AsyncAppliesEachPushAtOnceAtTheLearningRateOverTheWorkers) {
  Rule rule(Options{{"mode", "async"}});
  const std::vector<Release> due = rule.push(1, 1.0F);
  ASSERT_EQ(workersOf(due), (std::vector<int>{1}));
  EXPECT_EQ(due[0].staleness, 0);
  EXPECT_EQ(rule.values(), (std::vector<float>{0.75F, 1.75F, 2.75F, 3.75F}));  // lr 0.5 / 2 workers
  EXPECT_EQ(rule->version(), 1);
  EXPECT_EQ(rule->worker(1).pushes, 1);
  // Computed on version 0, applied at 1: staleness 1, measured.
  const std::vector<Release> stale = rule.push(0, 1.0F, 0, {2, 2});
  ASSERT_EQ(stale.size(), 1U);
  EXPECT_EQ(stale[0].staleness, 1);
  EXPECT_EQ(rule->worker(0).stalenessMax, 1);
  // Buffers: the mean of each worker's latest (worker 1 pushed 0, 0).
  EXPECT_EQ(rule.buffer(), (std::vector<float>{1, 1}));
}

TEST(PsUpdateRuleTest, AsyncDividesTheLearningRateByTheStalenessWhenAsked) {
  Rule rule(Options{{"mode", "async"}, {"lr_staleness", "on"}, {"lr_scale", "none"}});
  rule.push(1, 1.0F, 0);                                   // staleness 0 counts as 1: 1 - 0.5
  rule.push(1, 1.0F, 1);                                   // 0.5 - 0.5
  const std::vector<Release> due = rule.push(0, 1.0F, 0);  // computed on 0, applied at 2: lr 0.5 / 2
  ASSERT_EQ(due.size(), 1U);
  EXPECT_EQ(due[0].staleness, 2);
  EXPECT_EQ(rule.values(), (std::vector<float>{-0.25F, 0.75F, 1.75F, 2.75F}));
}

TEST(PsUpdateRuleTest, DcAsgdCompensatesAGradientComputedOnOlderValues) {
  Rule rule(Options{{"mode", "async"}, {"dc_asgd", "0.1"}, {"lr_scale", "none"}});
  rule->recordSent(0);  // worker 0 computes on v0 = 1, 2, 3, 4
  rule.push(1, 1.0F);   // never sent values: no compensation; v1 = v0 - 0.5
  rule.push(0, 2.0F);   // 2 + 0.1 * 4 * (-0.5) = 1.8; v2 = v1 - 0.9
  const std::vector<float> expected{-0.4F, 0.6F, 1.6F, 2.6F};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(rule.values()[i], expected[i], 1e-6) << i;
  }
}

TEST(PsUpdateRuleTest, SspHoldsAWorkerMoreThanKPushesAheadUntilTheSlowestCatchesUpOrLeaves) {
  Rule rule(Options{{"mode", "ssp"}, {"staleness", "1"}}, 3);
  EXPECT_EQ(workersOf(rule.push(0, 1.0F)), (std::vector<int>{0})) << "one ahead of the slowest: within K = 1";
  EXPECT_TRUE(rule.push(0, 1.0F).empty()) << "two ahead: held";
  EXPECT_TRUE(rule->worker(0).waiting);
  EXPECT_EQ(workersOf(rule.push(1, 1.0F)), (std::vector<int>{1})) << "worker 2 is still at 0";
  EXPECT_EQ(workersOf(rule->markIdle(2)), (std::vector<int>{0})) << "an idle worker holds nobody back";
  EXPECT_EQ(rule->version(), 3);
  EXPECT_TRUE(rule.push(0, 1.0F).empty()) << "clock 3 against worker 1's 1";
  EXPECT_EQ(workersOf(rule->markDeparted(1)), (std::vector<int>{0})) << "nor does a departed one";
  EXPECT_FALSE(rule.trace.empty());
}

TEST(PsUpdateRuleTest, RefusesAPushWhoseFramesDoNotFitAndOneBeforeTheValues) {
  Rule rule(Options{{"mode", "sync"}});
  Header request;
  request.worker = 0;
  std::vector<std::byte> tooShort(8);
  const std::vector<Frame> data{Frame(tooShort), Frame(tooShort)};
  EXPECT_THROW((*rule).push(0, request, data), Error);
  UpdateRule empty(parsePsOptions({}), 0, 1, false, false);
  EXPECT_THROW(empty.push(0, request, data), Error);
}

}  // namespace
}  // namespace strata::ps
