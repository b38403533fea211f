// Tests for Status, Result<T>, the propagation macros and Deadline.
#include "base/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <string>
#include <thread>

namespace loom {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(StatusTest, CodesMatchNcclResultNumbering) {
  // The C ABI converts these 1:1 to ncclResult_t.
  EXPECT_EQ(static_cast<int>(Code::kOk), 0);
  EXPECT_EQ(static_cast<int>(Code::kUnhandledCudaError), 1);
  EXPECT_EQ(static_cast<int>(Code::kSystemError), 2);
  EXPECT_EQ(static_cast<int>(Code::kInternalError), 3);
  EXPECT_EQ(static_cast<int>(Code::kInvalidArgument), 4);
  EXPECT_EQ(static_cast<int>(Code::kInvalidUsage), 5);
  EXPECT_EQ(static_cast<int>(Code::kRemoteError), 6);
  EXPECT_EQ(static_cast<int>(Code::kInProgress), 7);
}

TEST(StatusTest, CodeNames) {
  EXPECT_EQ(CodeName(Code::kOk), "OK");
  EXPECT_EQ(CodeName(Code::kUnhandledCudaError), "UnhandledCudaError");
  EXPECT_EQ(CodeName(Code::kSystemError), "SystemError");
  EXPECT_EQ(CodeName(Code::kInternalError), "InternalError");
  EXPECT_EQ(CodeName(Code::kInvalidArgument), "InvalidArgument");
  EXPECT_EQ(CodeName(Code::kInvalidUsage), "InvalidUsage");
  EXPECT_EQ(CodeName(Code::kRemoteError), "RemoteError");
  EXPECT_EQ(CodeName(Code::kInProgress), "InProgress");
  EXPECT_EQ(CodeName(Code::kTimeout), "Timeout");
  EXPECT_EQ(CodeName(static_cast<Code>(42)), "Unknown");
}

TEST(StatusTest, HelpersSetCodeAndMessage) {
  EXPECT_EQ(InvalidArgument("a").code(), Code::kInvalidArgument);
  EXPECT_EQ(InvalidUsage("b").code(), Code::kInvalidUsage);
  EXPECT_EQ(InternalError("c").code(), Code::kInternalError);
  EXPECT_EQ(RemoteError("d").code(), Code::kRemoteError);
  EXPECT_EQ(TimeoutError("e").code(), Code::kTimeout);
  EXPECT_EQ(InProgress("f").code(), Code::kInProgress);
  EXPECT_EQ(SystemError("g").code(), Code::kSystemError);
  EXPECT_EQ(RemoteError("peer 3 on hostB closed the connection").ToString(),
            "RemoteError: peer 3 on hostB closed the connection");
}

TEST(StatusTest, OkCodeWithMessageIsStillOk) {
  Status s(Code::kOk, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
}

TEST(StatusTest, EmptyMessageOnError) {
  Status s(Code::kInternalError, "");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "InternalError: ");
}

TEST(StatusTest, WithContextPrependsAndLeavesOriginal) {
  Status inner = RemoteError("connection reset");
  Status outer = inner.WithContext("recv from rank 2").WithContext("allreduce");
  EXPECT_EQ(outer.code(), Code::kRemoteError);
  EXPECT_EQ(outer.message(), "allreduce: recv from rank 2: connection reset");
  EXPECT_EQ(inner.message(), "connection reset");  // statuses are values
}

TEST(StatusTest, WithContextOnOkStaysOk) {
  Status s = Status::Ok().WithContext("anything");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
}

TEST(StatusTest, CopiesShareNothingObservable) {
  Status a = InvalidArgument("x");
  Status b = a;
  a = Status::Ok();
  EXPECT_TRUE(a.ok());
  EXPECT_EQ(b.ToString(), "InvalidArgument: x");
}

TEST(StatusTest, SystemErrorNamesTheErrno) {
  Status s = SystemError("connect to 10.0.0.2:5000", ECONNREFUSED);
  EXPECT_EQ(s.code(), Code::kSystemError);
  EXPECT_EQ(s.message(), "connect to 10.0.0.2:5000 (Connection refused, ECONNREFUSED)");
}

TEST(StatusTest, SystemErrorWithUnknownErrno) {
  // No errno name exists for this value; the message must still be well formed.
  Status s = SystemError("op", 99999);
  EXPECT_EQ(s.code(), Code::kSystemError);
  EXPECT_EQ(s.message().rfind("op (", 0), 0u);
  EXPECT_EQ(s.message().back(), ')');
}

Result<int> ParsePositive(int v) {
  if (v <= 0) return InvalidArgument("not positive: " + std::to_string(v));
  return v;
}

TEST(ResultTest, HoldsValueOrStatus) {
  Result<int> good = ParsePositive(7);
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(good.status().ok());
  EXPECT_EQ(good.value(), 7);
  EXPECT_EQ(*good, 7);

  Result<int> bad = ParsePositive(-1);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "not positive: -1");
}

TEST(ResultTest, MoveOnlyValueAndArrow) {
  Result<std::unique_ptr<std::string>> r(std::make_unique<std::string>("abc"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->size(), 3u);
  std::unique_ptr<std::string> taken = std::move(r).value();
  EXPECT_EQ(*taken, "abc");

  Result<std::string> s(std::string("hello"));
  EXPECT_EQ(s->size(), 5u);
}

Status TryBoth(int a, int b, int* calls) {
  ++*calls;
  LOOM_TRY(ParsePositive(a));
  ++*calls;
  LOOM_TRY(b > 0 ? Status::Ok() : InvalidUsage("b"));
  ++*calls;
  return Status::Ok();
}

TEST(MacroTest, TryPropagatesFirstErrorAndStops) {
  int calls = 0;
  EXPECT_TRUE(TryBoth(1, 1, &calls).ok());
  EXPECT_EQ(calls, 3);

  calls = 0;
  Status s = TryBoth(-5, 1, &calls);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(calls, 1);

  calls = 0;
  s = TryBoth(1, 0, &calls);
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  EXPECT_EQ(calls, 2);
}

TEST(MacroTest, TryEvaluatesExpressionOnce) {
  int evaluations = 0;
  auto f = [&]() -> Status {
    LOOM_TRY((++evaluations, Status::Ok()));
    return Status::Ok();
  };
  EXPECT_TRUE(f().ok());
  EXPECT_EQ(evaluations, 1);
}

Result<int> Sum(int a, int b) {
  LOOM_ASSIGN_OR_RETURN(int x, ParsePositive(a));
  LOOM_ASSIGN_OR_RETURN(int y, ParsePositive(b));  // two uses on separate lines
  return x + y;
}

TEST(MacroTest, AssignOrReturn) {
  Result<int> ok = Sum(2, 3);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 5);
  Result<int> bad = Sum(2, -3);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "not positive: -3");
}

Status AssignMoveOnly(std::string* out) {
  std::unique_ptr<std::string> p;
  LOOM_ASSIGN_OR_RETURN(p,
                        Result<std::unique_ptr<std::string>>(std::make_unique<std::string>("m")));
  *out = *p;
  return Status::Ok();
}

TEST(MacroTest, AssignOrReturnToExistingMoveOnlyVariable) {
  std::string out;
  EXPECT_TRUE(AssignMoveOnly(&out).ok());
  EXPECT_EQ(out, "m");
}

TEST(DeadlineTest, Never) {
  Deadline d = Deadline::Never();
  EXPECT_TRUE(d.never());
  EXPECT_FALSE(d.expired());
  EXPECT_EQ(d.RemainingMs(1234), 1234);
}

TEST(DeadlineTest, NonPositiveDurationMeansNever) {
  // A timeout of 0 (LOOM_TIMEOUT_MS=0) means "never time out".
  EXPECT_TRUE(Deadline::After(std::chrono::milliseconds(0)).never());
  EXPECT_TRUE(Deadline::After(std::chrono::milliseconds(-5)).never());
}

TEST(DeadlineTest, AfterCountsDownAndExpires) {
  Deadline d = Deadline::After(std::chrono::milliseconds(30));
  EXPECT_FALSE(d.never());
  EXPECT_FALSE(d.expired());
  int64_t left = d.RemainingMs(1'000'000);
  EXPECT_GT(left, 0);
  EXPECT_LE(left, 30);
  EXPECT_EQ(d.RemainingMs(5), 5);  // clamped to the cap
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(d.RemainingMs(100), 0);  // never negative
}

TEST(DeadlineTest, AtAndMin) {
  auto now = Deadline::Clock::now();
  Deadline past = Deadline::At(now - std::chrono::seconds(1));
  Deadline future = Deadline::At(now + std::chrono::hours(1));
  EXPECT_TRUE(past.expired());
  EXPECT_FALSE(future.expired());
  EXPECT_EQ(past.Min(future).at(), past.at());
  EXPECT_EQ(future.Min(past).at(), past.at());
  EXPECT_EQ(Deadline::Never().Min(future).at(), future.at());
  EXPECT_TRUE(Deadline::Never().Min(Deadline::Never()).never());
}

}  // namespace
}  // namespace loom
