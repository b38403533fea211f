// Tests of the JSON parser and printer behind topology files.
#include "topology/json.h"

#include <gtest/gtest.h>

namespace loom::json {
namespace {

TEST(JsonTest, ParsesEveryKindOfValue) {
  auto r = Parse(R"( {"a": [1, -2.5, 1e3, true, false, null], "s": "x\ny\u00e9\ud83d\ude00", "o": {}} )");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Value& v = *r;
  ASSERT_TRUE(v.is_object());
  const Value* a = v.Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->array().size(), 6u);
  EXPECT_EQ(a->array()[0].number(), 1);
  EXPECT_EQ(a->array()[1].number(), -2.5);
  EXPECT_EQ(a->array()[2].number(), 1000);
  EXPECT_TRUE(a->array()[3].boolean());
  EXPECT_FALSE(a->array()[4].boolean());
  EXPECT_TRUE(a->array()[5].is_null());
  EXPECT_EQ(v.Find("s")->string(), "x\ny\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_TRUE(v.Find("o")->object().empty());
  EXPECT_EQ(v.Find("missing"), nullptr);
  EXPECT_EQ(a->Find("a"), nullptr);  // not an object
}

TEST(JsonTest, RejectsMalformedInputWithPosition) {
  const char* bad[] = {
      "",          "{",           "[1,]",         "{\"a\":1,}",  "01",     "1.",
      "-",         "+1",          "\"abc",        "\"\\x\"",     "tru",    "{\"a\" 1}",
      "[1] 2",     "\"\\ud800\"", "{\"a\":1,\"a\":2}", "\"a\tb\"", "1e999", "NaN",
  };
  for (const char* text : bad) {
    auto r = Parse(text);
    EXPECT_FALSE(r.ok()) << "accepted: " << text;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    }
  }
  auto r = Parse("{\n  \"a\": [1,\n  ]\n}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("3:3"), std::string::npos) << r.status().message();
}

TEST(JsonTest, RefusesDeepNesting) {
  std::string deep(100, '[');
  deep += std::string(100, ']');
  EXPECT_FALSE(Parse(deep).ok());
  std::string ok(60, '[');
  ok += std::string(60, ']');
  EXPECT_TRUE(Parse(ok).ok());
}

TEST(JsonTest, DumpIsStableAndReadsBack) {
  Value::Object inner;
  inner.emplace_back("id", "gpu0");
  inner.emplace_back("bw", 12.5);
  inner.emplace_back("n", 3);
  Value::Object root;
  root.emplace_back("nodes", Value::Array{Value(inner), Value(inner)});
  root.emplace_back("q", "quote\" back\\ ctl\x01");
  root.emplace_back("empty", Value::Array{});
  root.emplace_back("third", 1.0 / 3.0);
  const Value v(root);
  const std::string text = Dump(v);
  EXPECT_EQ(text,
            "{\n"
            "  \"nodes\": [\n"
            "    {\"id\": \"gpu0\", \"bw\": 12.5, \"n\": 3},\n"
            "    {\"id\": \"gpu0\", \"bw\": 12.5, \"n\": 3}\n"
            "  ],\n"
            "  \"q\": \"quote\\\" back\\\\ ctl\\u0001\",\n"
            "  \"empty\": [],\n"
            "  \"third\": 0.3333333333333333\n"
            "}\n");
  auto back = Parse(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, v);
  EXPECT_EQ(Dump(*back), text);
}

TEST(JsonTest, LongScalarObjectsBreakAcrossLines) {
  Value::Object o;
  for (int i = 0; i < 24; ++i) o.emplace_back("member" + std::to_string(i), i);
  const std::string text = Dump(Value(o));
  EXPECT_NE(text.find("\n  \"member23\": 23\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace loom::json
