// Status, Result<T> and Deadline: errors as cheap values with context, and
// the absolute time limit every blocking call takes. Part of the public API.
//
// Codes are numbered like ncclResult_t so the C ABI converts them 1:1 (plus
// kTimeout, which the C ABI reports as ncclRemoteError). A message says who,
// what, why and what to do: peer rank and host, transport, the OS error, a hint.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace loom {

enum class Code : int {
  kOk = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
  kTimeout = 100,  // not in NCCL; reported as ncclRemoteError through the C ABI
};

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message);

  static Status Ok() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  Code code() const { return rep_ ? rep_->code : Code::kOk; }
  const std::string& message() const;
  // "CodeName: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "context: <old message>".
  Status WithContext(std::string_view context) const;

 private:
  struct Rep {
    Code code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null when OK: copying an OK status is free
};

inline Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
inline Status InvalidUsage(std::string m) { return Status(Code::kInvalidUsage, std::move(m)); }
inline Status InternalError(std::string m) { return Status(Code::kInternalError, std::move(m)); }
inline Status RemoteError(std::string m) { return Status(Code::kRemoteError, std::move(m)); }
inline Status TimeoutError(std::string m) { return Status(Code::kTimeout, std::move(m)); }
inline Status InProgress(std::string m) { return Status(Code::kInProgress, std::move(m)); }
// A failed system call: appends strerror(err) and the errno name.
Status SystemError(std::string m, int err);
inline Status SystemError(std::string m) { return Status(Code::kSystemError, std::move(m)); }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must not be OK

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> v_;
};

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline Never() { return Deadline(Clock::time_point::max()); }
  static Deadline After(std::chrono::milliseconds ms) {
    if (ms.count() <= 0) return Never();
    return Deadline(Clock::now() + ms);
  }
  static Deadline At(Clock::time_point t) { return Deadline(t); }

  bool never() const { return at_ == Clock::time_point::max(); }
  bool expired() const { return !never() && Clock::now() >= at_; }
  Clock::time_point at() const { return at_; }
  // Milliseconds left, clamped to [0, cap_ms]; cap_ms when the deadline is never.
  int64_t RemainingMs(int64_t cap_ms) const {
    if (never()) return cap_ms;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    return left < cap_ms ? left : cap_ms;
  }
  // The earlier of two deadlines.
  Deadline Min(Deadline other) const { return at_ < other.at_ ? *this : other; }

 private:
  explicit Deadline(Clock::time_point t) : at_(t) {}
  Clock::time_point at_;
};

namespace internal {
inline Status AsStatus(const Status& s) { return s; }
template <typename T>
Status AsStatus(const Result<T>& r) {
  return r.status();
}
}  // namespace internal

}  // namespace loom

#define LOOM_CONCAT_INNER(a, b) a##b
#define LOOM_CONCAT(a, b) LOOM_CONCAT_INNER(a, b)

// Propagates a non-OK Status (or the Status of a failed Result).
#define LOOM_TRY(expr)                                                     \
  do {                                                                     \
    ::loom::Status _loom_st = ::loom::internal::AsStatus((expr));          \
    if (!_loom_st.ok()) return _loom_st;                                   \
  } while (0)

// LOOM_ASSIGN_OR_RETURN(auto x, F()): x = F().value() or return its Status.
#define LOOM_ASSIGN_OR_RETURN(lhs, expr) \
  LOOM_ASSIGN_OR_RETURN_IMPL(LOOM_CONCAT(_loom_r_, __LINE__), lhs, expr)
#define LOOM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
