// Status: code names, formatting, errno conversion.
#include "base/status.h"

#include <cstring>

namespace loom {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kUnhandledCudaError: return "UnhandledCudaError";
    case Code::kSystemError: return "SystemError";
    case Code::kInternalError: return "InternalError";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kInvalidUsage: return "InvalidUsage";
    case Code::kRemoteError: return "RemoteError";
    case Code::kInProgress: return "InProgress";
    case Code::kTimeout: return "Timeout";
  }
  return "Unknown";
}

Status::Status(Code code, std::string message) {
  if (code != Code::kOk) rep_ = std::make_shared<const Rep>(Rep{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code()));
  s += ": ";
  s += rep_->message;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += rep_->message;
  return Status(code(), std::move(m));
}

Status SystemError(std::string m, int err) {
  m += " (";
  m += std::strerror(err);
  const char* name = strerrorname_np(err);
  if (name != nullptr) {
    m += ", ";
    m += name;
  }
  m += ")";
  return Status(Code::kSystemError, std::move(m));
}

}  // namespace loom
