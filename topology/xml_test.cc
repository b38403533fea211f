// Tests of the minimal XML reader.
#include "topology/xml.h"

#include <gtest/gtest.h>

namespace loom::xml {
namespace {

TEST(XmlTest, ParsesElementsAttributesAndSkipsTheRest) {
  auto r = Parse(R"(<?xml version="1.0"?>
<!-- dumped by NCCL -->
<system version="1">
  <cpu numaid='0' note="a &lt;b&gt; &amp; &quot;c&quot; &#65;">text is ignored
    <pci busid="0000:01:00.0"/>
    <!-- inner comment -->
    <pci busid="0000:02:00.0"></pci >
  </cpu>
</system>
)");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->name, "system");
  EXPECT_EQ(*r->Attr("version"), "1");
  EXPECT_EQ(r->Attr("missing"), nullptr);
  ASSERT_EQ(r->children.size(), 1u);
  const Element& cpu = r->children[0];
  EXPECT_EQ(*cpu.Attr("numaid"), "0");
  EXPECT_EQ(*cpu.Attr("note"), "a <b> & \"c\" A");
  ASSERT_EQ(cpu.children.size(), 2u);
  EXPECT_EQ(*cpu.children[1].Attr("busid"), "0000:02:00.0");
  EXPECT_EQ(cpu.children[1].line, 7);
}

TEST(XmlTest, RejectsMalformedDocuments) {
  const char* bad[] = {
      "",
      "<a>",
      "<a></b>",
      "<a x=1/>",
      "<a x=\"1\" x=\"2\"/>",
      "<a x=\"&bogus;\"/>",
      "<a x=\"unterminated/>",
      "<a/><b/>",
      "<a><!-- never closed </a>",
      "< a/>",
  };
  for (const char* text : bad) EXPECT_FALSE(Parse(text).ok()) << "accepted: " << text;
  auto r = Parse("<a>\n<b>\n</a>");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("line 3"), std::string::npos) << r.status().message();
}

TEST(XmlTest, RefusesDeepNesting) {
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "<a>";
  for (int i = 0; i < 100; ++i) deep += "</a>";
  EXPECT_FALSE(Parse(deep).ok());
}

}  // namespace
}  // namespace loom::xml
