// cli/common/yaml_document.cpp: a YAML file as the JSON document it spells.
#include "common/yaml_document.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "strata/error.h"

namespace strata::cli {
namespace {

std::string writeYaml(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("strata_yaml_test_" + name + ".yaml");
  std::ofstream(path) << text;
  return path.string();
}

TEST(YamlDocumentTest, PlainScalarsAreTypedAndQuotedOnesStayText) {
  const nlohmann::json doc = readYamlAsJson(writeYaml("scalars",
                                                      "int: 10\nneg: -3\nplus: +4\nreal: 0.01\nexp: 1e-3\nyes: true\n"
                                                      "no: False\nnothing: ~\nempty:\nquoted: \"10\"\nsingle: 'true'\n"
                                                      "word: sgd\nflag: --lr\nratio: 3:2\ninf: .inf\n"));
  EXPECT_EQ(doc["int"], 10);
  EXPECT_EQ(doc["neg"], -3);
  EXPECT_EQ(doc["plus"], 4);
  EXPECT_DOUBLE_EQ(doc["real"].get<double>(), 0.01);
  EXPECT_DOUBLE_EQ(doc["exp"].get<double>(), 1e-3);
  EXPECT_EQ(doc["yes"], true);
  EXPECT_EQ(doc["no"], false);
  EXPECT_TRUE(doc["nothing"].is_null());
  EXPECT_TRUE(doc["empty"].is_null());
  EXPECT_EQ(doc["quoted"], "10");
  EXPECT_EQ(doc["single"], "true");
  EXPECT_EQ(doc["word"], "sgd");
  EXPECT_EQ(doc["flag"], "--lr");
  EXPECT_EQ(doc["ratio"], "3:2");
  EXPECT_EQ(doc["inf"], ".inf");  // not a finite number: kept as text
}

TEST(YamlDocumentTest, MappingsAndSequencesNest) {
  const nlohmann::json doc =
      readYamlAsJson(writeYaml("nested", "list: [a, 2]\nblock:\n  - name: x\n    sizes: [1, 2]\n  - b\n"));
  EXPECT_EQ(doc, nlohmann::json::parse(R"({"list": ["a", 2], "block": [{"name": "x", "sizes": [1, 2]}, "b"]})"));
}

std::string yamlErrorOf(const std::string& path) {
  try {
    readYamlAsJson(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(YamlDocumentTest, ErrorsNameTheFileAndPosition) {
  const std::string bad = writeYaml("bad", "a: [1,\nb: 2\n");
  EXPECT_NE(yamlErrorOf(bad).find(bad + ":3:1: not valid YAML: "), std::string::npos) << yamlErrorOf(bad);
  const std::string key = writeYaml("key", "? [a, b]\n: 1\n");
  EXPECT_NE(yamlErrorOf(key).find(key + ":1:3: not valid YAML for a spec: a mapping key is not a scalar"),
            std::string::npos)
      << yamlErrorOf(key);
  EXPECT_NE(yamlErrorOf("/no/such/spec.yaml").find("/no/such/spec.yaml: cannot read the file"), std::string::npos);
}

}  // namespace
}  // namespace strata::cli
