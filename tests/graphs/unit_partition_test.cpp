// The unit partition pass (graphs/unit_partition.h) on parameter lists, and TrainingPlan's use of it: units as
// flat buffers of their own, parameters kept in first-use order.
#include "strata/graphs/unit_partition.h"

#include <gtest/gtest.h>

#include "strata/error.h"

namespace strata {
namespace {

std::vector<UnitCandidate> candidates(std::vector<std::pair<std::string, std::int64_t>> list) {
  std::vector<UnitCandidate> out;
  for (auto& [name, elements] : list) {
    out.push_back(UnitCandidate{name, elements});
  }
  return out;
}

TEST(UnitPartitionTest, ModulePathIsTheNameUpToItsLastSeparator) {
  EXPECT_EQ(modulePath("layer1.0.conv1.weight"), "layer1.0.conv1");
  EXPECT_EQ(modulePath("/layer1/conv/weight"), "/layer1/conv");
  EXPECT_EQ(modulePath("encoder/layer.0.bias"), "encoder/layer.0");
  EXPECT_EQ(modulePath("onnx::Conv_193"), "");
}

TEST(UnitPartitionTest, NoneIsOneUnit) {
  const auto params = candidates({{"a.weight", 10}, {"b.weight", 20}});
  EXPECT_EQ(partitionUnits(params, UnitPartition{}), (std::vector<int>{0, 0}));
  EXPECT_TRUE(partitionUnits({}, UnitPartition{.kind = UnitPartition::Kind::ByModule}).empty());
}

TEST(UnitPartitionTest, ByModuleStartsAUnitWhereTheModuleChanges) {
  const auto params = candidates({{"layer1.0.conv1.weight", 9},
                                  {"layer1.0.bn1.weight", 3},
                                  {"layer1.0.bn1.bias", 3},
                                  {"/fc/weight", 30},
                                  {"/fc/bias", 3},
                                  {"layer1.0.conv1.bias", 3},  // the module again, later: a unit of its own
                                  {"onnx::Conv_7", 4},         // no module path: each its own unit
                                  {"onnx::Conv_8", 4}});
  EXPECT_EQ(partitionUnits(params, UnitPartition{.kind = UnitPartition::Kind::ByModule}),
            (std::vector<int>{0, 1, 1, 2, 2, 3, 4, 5}));
}

// Note [Small modules]: a module below smallModule elements joins the unit before it; the first module always
// starts unit 0, and a module that is large enough starts a unit even after small ones.
TEST(UnitPartitionTest, SmallModulesJoinTheUnitBeforeThem) {
  const auto params = candidates({{"conv1.weight", 9},
                                  {"bn1.weight", 3},
                                  {"bn1.bias", 3},  // bn1: 6 elements, small
                                  {"conv2.weight", 50},
                                  {"bn2.weight", 3},
                                  {"bn2.bias", 3},
                                  {"act.scale", 1},  // two small modules in a row join conv2's unit
                                  {"fc.weight", 30},
                                  {"fc.bias", 3}});
  const UnitPartition small{.kind = UnitPartition::Kind::ByModule, .smallModule = 8};
  EXPECT_EQ(partitionUnits(params, small), (std::vector<int>{0, 0, 0, 1, 1, 1, 1, 2, 2}));
  // conv1 (9 elements) is below 10 too, but it comes first: it starts unit 0 and bn1 joins it.
  const UnitPartition larger{.kind = UnitPartition::Kind::ByModule, .smallModule = 10};
  EXPECT_EQ(partitionUnits(params, larger), (std::vector<int>{0, 0, 0, 1, 1, 1, 1, 2, 2}));
  // Everything below 100: one unit.
  const UnitPartition all{.kind = UnitPartition::Kind::ByModule, .smallModule = 100};
  EXPECT_EQ(partitionUnits(params, all), (std::vector<int>(9, 0)));
  // smallModule 0: one unit per module.
  EXPECT_EQ(partitionUnits(params, UnitPartition{.kind = UnitPartition::Kind::ByModule}),
            (std::vector<int>{0, 1, 1, 2, 3, 3, 4, 5, 5}));
}

// Note [Small modules]: a run of small modules splits once a unit would outgrow the largest module by a small one.
TEST(UnitPartitionTest, ARunOfSmallModulesStopsJoiningPastTheLargestModule) {
  const auto params = candidates({{"a.weight", 5}, {"b.weight", 5}, {"c.weight", 5}, {"d.weight", 5}, {"e.weight", 5}});
  // The largest module holds 5 elements, so a unit holds at most 5 + 10: a, b, c; then d, e.
  EXPECT_EQ(partitionUnits(params, UnitPartition{.kind = UnitPartition::Kind::ByModule, .smallModule = 10}),
            (std::vector<int>{0, 0, 0, 1, 1}));
  const auto mixed = candidates({{"conv.weight", 20}, {"bn.weight", 4}, {"bn.bias", 4}, {"act.scale", 4}});
  // conv (20) + bn (8) = 28 <= 20 + 10; act would make 32: a unit of its own.
  EXPECT_EQ(partitionUnits(mixed, UnitPartition{.kind = UnitPartition::Kind::ByModule, .smallModule = 10}),
            (std::vector<int>{0, 0, 0, 1}));
}

TEST(UnitPartitionTest, ByParameterCountClosesAUnitOnceItHoldsEnough) {
  const auto params = candidates({{"a", 40}, {"b", 50}, {"c", 30}, {"d", 100}, {"e", 1}, {"f", 99}, {"g", 5}});
  // 40+50 < 100, +30 = 120: closed; 100: closed; 1+99: closed; 5: the last unit may hold less.
  EXPECT_EQ(partitionUnits(params, UnitPartition{.kind = UnitPartition::Kind::ByParameterCount, .parameters = 100}),
            (std::vector<int>{0, 0, 0, 1, 2, 2, 3}));
  EXPECT_EQ(partitionUnits(params, UnitPartition{.kind = UnitPartition::Kind::ByParameterCount, .parameters = 1}),
            (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_THROW(partitionUnits(params, UnitPartition{.kind = UnitPartition::Kind::ByParameterCount}), Error);
}

}  // namespace
}  // namespace strata
