// JSON parsing and printing for topology files (see json.h).
#include "topology/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace loom::json {

const Value* Value::Find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const Member& m : object()) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

namespace {

constexpr int kMaxDepth = 64;
constexpr size_t kOneLineColumns = 220;

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Result<Value> Document() {
    Value v;
    LOOM_TRY(ParseValue(0, &v));
    SkipSpace();
    if (pos_ != s_.size()) return Error("unexpected text after the document");
    return v;
  }

 private:
  Status Error(const std::string& what) const {
    int line = 1;
    int col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return InvalidArgument("JSON " + std::to_string(line) + ":" + std::to_string(col) + ": " + what);
  }

  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Status ParseValue(int depth, Value* out) {
    if (depth > kMaxDepth) return Error("nesting deeper than 64 levels");
    SkipSpace();
    if (pos_ >= s_.size()) return Error("unexpected end of input");
    const char c = s_[pos_];
    if (c == '{') return ParseObject(depth, out);
    if (c == '[') return ParseArray(depth, out);
    if (c == '"') {
      std::string str;
      LOOM_TRY(ParseString(&str));
      *out = Value(std::move(str));
      return Status::Ok();
    }
    if (Consume("true")) {
      *out = Value(true);
      return Status::Ok();
    }
    if (Consume("false")) {
      *out = Value(false);
      return Status::Ok();
    }
    if (Consume("null")) {
      *out = Value();
      return Status::Ok();
    }
    return ParseNumber(out);
  }

  Status ParseNumber(Value* out) {
    // JSON's grammar is stricter than from_chars: no '+', no leading zeros,
    // digits on both sides of '.'.
    const size_t start = pos_;
    auto digits = [&] {
      const size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    const size_t int_start = pos_;
    const size_t int_digits = digits();
    if (int_digits == 0) return Error("expected a value");
    if (int_digits > 1 && s_[int_start] == '0') return Error("leading zero in a number");
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return Error("expected digits after '.'");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return Error("expected digits in the exponent");
    }
    double d = 0;
    auto [ptr, ec] = std::from_chars(s_.data() + start, s_.data() + pos_, d);
    if (ec != std::errc() || ptr != s_.data() + pos_ || !std::isfinite(d)) {
      pos_ = start;
      return Error("number out of range");
    }
    *out = Value(d);
    return Status::Ok();
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  Status Hex4(uint32_t* cp) {
    if (pos_ + 4 > s_.size()) return Error("truncated \\u escape");
    uint32_t v = 0;
    auto [ptr, ec] = std::from_chars(s_.data() + pos_, s_.data() + pos_ + 4, v, 16);
    if (ec != std::errc() || ptr != s_.data() + pos_ + 4) return Error("bad \\u escape");
    pos_ += 4;
    *cp = v;
    return Status::Ok();
  }

  Status ParseString(std::string* out) {
    ++pos_;  // opening quote
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return Status::Ok();
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        return Error("control character in a string");
      }
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return Error("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          LOOM_TRY(Hex4(&cp));
          if (cp >= 0xD800 && cp < 0xDC00) {
            // A high surrogate must be followed by its low half.
            uint32_t lo = 0;
            if (!Consume("\\u")) return Error("unpaired surrogate in \\u escape");
            LOOM_TRY(Hex4(&lo));
            if (lo < 0xDC00 || lo >= 0xE000) return Error("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return Error("unpaired surrogate in \\u escape");
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          --pos_;
          return Error(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  Status ParseArray(int depth, Value* out) {
    ++pos_;
    Value::Array arr;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      *out = Value(std::move(arr));
      return Status::Ok();
    }
    while (true) {
      Value v;
      LOOM_TRY(ParseValue(depth + 1, &v));
      arr.push_back(std::move(v));
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        *out = Value(std::move(arr));
        return Status::Ok();
      }
      return Error("expected ',' or ']'");
    }
  }

  Status ParseObject(int depth, Value* out) {
    ++pos_;
    Value::Object obj;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      *out = Value(std::move(obj));
      return Status::Ok();
    }
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a member name in quotes");
      std::string key;
      LOOM_TRY(ParseString(&key));
      for (const Value::Member& m : obj) {
        if (m.first == key) return Error("duplicate member \"" + key + "\"");
      }
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      Value v;
      LOOM_TRY(ParseValue(depth + 1, &v));
      obj.emplace_back(std::move(key), std::move(v));
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        *out = Value(std::move(obj));
        return Status::Ok();
      }
      return Error("expected ',' or '}'");
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

void DumpString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          *out += buf;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void DumpNumber(double d, std::string* out) {
  char buf[32];
  if (std::floor(d) == d && std::fabs(d) < 9007199254740992.0) {
    std::snprintf(buf, sizeof buf, "%.0f", d);
    *out += buf;
    return;
  }
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, d);
  out->append(buf, ec == std::errc() ? ptr : buf);
}

bool IsScalar(const Value& v) { return !v.is_array() && !v.is_object(); }

bool HoldsOnlyScalars(const Value& v) {
  if (v.is_array()) {
    for (const Value& e : v.array()) {
      if (!IsScalar(e)) return false;
    }
  } else if (v.is_object()) {
    for (const Value::Member& m : v.object()) {
      if (!IsScalar(m.second)) return false;
    }
  }
  return true;
}

void DumpValue(const Value& v, int indent, size_t column, std::string* out);

void DumpOneLine(const Value& v, std::string* out) {
  if (v.is_array()) {
    out->push_back('[');
    for (size_t i = 0; i < v.array().size(); ++i) {
      if (i > 0) *out += ", ";
      DumpOneLine(v.array()[i], out);
    }
    out->push_back(']');
  } else if (v.is_object()) {
    out->push_back('{');
    for (size_t i = 0; i < v.object().size(); ++i) {
      if (i > 0) *out += ", ";
      DumpString(v.object()[i].first, out);
      *out += ": ";
      DumpOneLine(v.object()[i].second, out);
    }
    out->push_back('}');
  } else {
    DumpValue(v, 0, 0, out);
  }
}

// `column` is where the value starts on its line, to decide whether the
// one-line form fits.
void DumpValue(const Value& v, int indent, size_t column, std::string* out) {
  switch (v.type()) {
    case Value::Type::kNull: *out += "null"; return;
    case Value::Type::kBool: *out += v.boolean() ? "true" : "false"; return;
    case Value::Type::kNumber: DumpNumber(v.number(), out); return;
    case Value::Type::kString: DumpString(v.string(), out); return;
    case Value::Type::kArray:
    case Value::Type::kObject: break;
  }
  const bool is_array = v.is_array();
  const size_t n = is_array ? v.array().size() : v.object().size();
  if (n == 0) {
    *out += is_array ? "[]" : "{}";
    return;
  }
  if (HoldsOnlyScalars(v)) {
    std::string line;
    DumpOneLine(v, &line);
    if (column + line.size() <= kOneLineColumns) {
      *out += line;
      return;
    }
  }
  const std::string pad(static_cast<size_t>(indent + 2), ' ');
  out->push_back(is_array ? '[' : '{');
  for (size_t i = 0; i < n; ++i) {
    *out += i == 0 ? "\n" : ",\n";
    *out += pad;
    size_t col = pad.size();
    const Value* e = nullptr;
    if (is_array) {
      e = &v.array()[i];
    } else {
      const size_t before = out->size();
      DumpString(v.object()[i].first, out);
      *out += ": ";
      col += out->size() - before;
      e = &v.object()[i].second;
    }
    DumpValue(*e, indent + 2, col, out);
  }
  out->push_back('\n');
  out->append(static_cast<size_t>(indent), ' ');
  out->push_back(is_array ? ']' : '}');
}

}  // namespace

Result<Value> Parse(std::string_view text) { return Parser(text).Document(); }

std::string Dump(const Value& v) {
  std::string out;
  DumpValue(v, 0, 0, &out);
  out.push_back('\n');
  return out;
}

}  // namespace loom::json
