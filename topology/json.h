// A small JSON value with a strict parser and a deterministic printer: the
// loom topology file and `loom topo --json` are written and read with it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/status.h"

namespace loom::json {

// A JSON value. Objects keep their members in insertion order so that what
// is printed is exactly what was built (stable golden files, identical round
// trips). A plain value: copyable, not thread-safe to mutate concurrently.
class Value {
 public:
  using Array = std::vector<Value>;
  using Member = std::pair<std::string, Value>;
  using Object = std::vector<Member>;
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  Value() = default;  // null
  Value(bool b) : v_(b) {}                         // NOLINT: implicit by design
  Value(double d) : v_(d) {}                       // NOLINT
  Value(int i) : v_(static_cast<double>(i)) {}     // NOLINT
  Value(int64_t i) : v_(static_cast<double>(i)) {}  // NOLINT
  Value(std::string s) : v_(std::move(s)) {}       // NOLINT
  Value(const char* s) : v_(std::string(s)) {}     // NOLINT
  Value(Array a) : v_(std::move(a)) {}             // NOLINT
  Value(Object o) : v_(std::move(o)) {}            // NOLINT

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_null() const { return type() == Type::kNull; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_number() const { return type() == Type::kNumber; }
  bool is_string() const { return type() == Type::kString; }
  bool is_array() const { return type() == Type::kArray; }
  bool is_object() const { return type() == Type::kObject; }

  // Accessors require the matching type (std::bad_variant_access otherwise):
  // check with is_*() first, as the readers in topo_file.cc do.
  bool boolean() const { return std::get<bool>(v_); }
  double number() const { return std::get<double>(v_); }
  const std::string& string() const { return std::get<std::string>(v_); }
  const Array& array() const { return std::get<Array>(v_); }
  Array& array() { return std::get<Array>(v_); }
  const Object& object() const { return std::get<Object>(v_); }
  Object& object() { return std::get<Object>(v_); }

  // The member named `key` of an object, or null when absent or when this
  // is not an object.
  const Value* Find(std::string_view key) const;

  friend bool operator==(const Value& a, const Value& b) { return a.v_ == b.v_; }

 private:
  std::variant<std::nullptr_t, bool, double, std::string, Array, Object> v_{nullptr};
};

// Parses one JSON document (RFC 8259; no comments, no trailing commas, no
// NaN). InvalidArgument names the line and column of the first error.
// Nesting deeper than 64 levels is refused rather than risking the stack.
Result<Value> Parse(std::string_view text);

// Prints `v` with two-space indentation and a final newline. An array or
// object that holds only scalars and fits in 220 columns goes on one line,
// which keeps topology files one node per line. Whole numbers below 2^53
// print without a fraction; others print in the shortest form that reads
// back to the same double. Deterministic: equal values print equal text.
std::string Dump(const Value& v);

}  // namespace loom::json
