// The minimal XML reader behind NCCL topology import (xml.h).
#include "topology/xml.h"

#include <charconv>

namespace loom::xml {

const std::string* Element::Attr(std::string_view key) const {
  for (const auto& [k, v] : attrs) {
    if (k == key) return &v;
  }
  return nullptr;
}

namespace {

constexpr int kMaxDepth = 64;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.' || c == ':';
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Result<Element> Document() {
    LOOM_TRY(SkipMisc());
    if (pos_ >= s_.size() || s_[pos_] != '<') return Error("expected a root element");
    Element root;
    LOOM_TRY(ParseElement(0, &root));
    LOOM_TRY(SkipMisc());
    if (pos_ != s_.size()) return Error("unexpected content after the root element");
    return root;
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgument("XML line " + std::to_string(Line()) + ": " + what);
  }
  int Line() const {
    int line = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) line += s_[i] == '\n';
    return line;
  }
  bool StartsWith(std::string_view p) const { return s_.substr(pos_, p.size()) == p; }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' ||
                                s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  Status SkipPast(std::string_view end, const char* what) {
    const size_t e = s_.find(end, pos_);
    if (e == std::string_view::npos) return Error(std::string("unterminated ") + what);
    pos_ = e + end.size();
    return Status::Ok();
  }
  // Whitespace, comments, processing instructions and DOCTYPE between elements.
  Status SkipMisc() {
    while (true) {
      SkipSpace();
      if (StartsWith("<!--")) {
        LOOM_TRY(SkipPast("-->", "comment"));
      } else if (StartsWith("<?")) {
        LOOM_TRY(SkipPast("?>", "processing instruction"));
      } else if (StartsWith("<!")) {
        LOOM_TRY(SkipPast(">", "declaration"));
      } else {
        return Status::Ok();
      }
    }
  }

  std::string_view Name() {
    const size_t start = pos_;
    while (pos_ < s_.size() && IsNameChar(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }

  Status Decode(std::string_view raw, std::string* out) {
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '&') {
        out->push_back(raw[i]);
        continue;
      }
      const size_t semi = raw.find(';', i);
      if (semi == std::string_view::npos) return Error("'&' without ';' in an attribute");
      const std::string_view ent = raw.substr(i + 1, semi - i - 1);
      if (ent == "lt") {
        out->push_back('<');
      } else if (ent == "gt") {
        out->push_back('>');
      } else if (ent == "amp") {
        out->push_back('&');
      } else if (ent == "quot") {
        out->push_back('"');
      } else if (ent == "apos") {
        out->push_back('\'');
      } else if (ent.size() > 1 && ent[0] == '#') {
        const bool hex = ent[1] == 'x';
        const std::string_view digits = ent.substr(hex ? 2 : 1);
        unsigned cp = 0;
        auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), cp, hex ? 16 : 10);
        if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() || cp > 0x7f)
          return Error("unsupported character reference '&" + std::string(ent) + ";'");
        out->push_back(static_cast<char>(cp));
      } else {
        return Error("unknown entity '&" + std::string(ent) + ";'");
      }
      i = semi;
    }
    return Status::Ok();
  }

  Status ParseElement(int depth, Element* el) {
    if (depth > kMaxDepth) return Error("elements nested deeper than 64");
    el->line = Line();
    ++pos_;  // '<'
    el->name = std::string(Name());
    if (el->name.empty()) return Error("expected an element name after '<'");
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size()) return Error("unterminated start tag <" + el->name + ">");
      if (StartsWith("/>")) {
        pos_ += 2;
        return Status::Ok();
      }
      if (s_[pos_] == '>') {
        ++pos_;
        break;
      }
      const std::string key(Name());
      if (key.empty()) return Error("bad attribute in <" + el->name + ">");
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '=') return Error("expected '=' after " + key);
      ++pos_;
      SkipSpace();
      if (pos_ >= s_.size() || (s_[pos_] != '"' && s_[pos_] != '\''))
        return Error("attribute " + key + " needs a quoted value");
      const char quote = s_[pos_++];
      const size_t end = s_.find(quote, pos_);
      if (end == std::string_view::npos) return Error("unterminated value of " + key);
      std::string value;
      LOOM_TRY(Decode(s_.substr(pos_, end - pos_), &value));
      pos_ = end + 1;
      if (el->Attr(key) != nullptr) return Error("duplicate attribute " + key);
      el->attrs.emplace_back(key, std::move(value));
    }
    // Content: child elements; text is ignored.
    while (true) {
      const size_t lt = s_.find('<', pos_);
      if (lt == std::string_view::npos) return Error("missing </" + el->name + ">");
      pos_ = lt;
      if (StartsWith("</")) {
        pos_ += 2;
        const std::string_view close = Name();
        SkipSpace();
        if (close != el->name || pos_ >= s_.size() || s_[pos_] != '>')
          return Error("</" + std::string(close) + "> does not close <" + el->name + ">");
        ++pos_;
        return Status::Ok();
      }
      if (StartsWith("<!--")) {
        LOOM_TRY(SkipPast("-->", "comment"));
        continue;
      }
      if (StartsWith("<?") || StartsWith("<!"))
        return Error("unsupported markup inside <" + el->name + ">");
      Element child;
      LOOM_TRY(ParseElement(depth + 1, &child));
      el->children.push_back(std::move(child));
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Result<Element> Parse(std::string_view text) { return Parser(text).Document(); }

}  // namespace loom::xml
