//===- Status.h - Error values for the runtime ------------------*- C++ -*-===//
//
// The runtime reports every failure (bad input files, resource exhaustion,
// device errors) as a Status that carries a message for the user. No
// exceptions cross a runtime API boundary.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SUPPORT_STATUS_H
#define INFER_RUNTIME_SUPPORT_STATUS_H

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace infer {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kDataLoss,
  kOutOfRange,
  kResourceExhausted,
  kUnimplemented,
  kInternal,
};

/// A success or an error with a message. Cheap to return by value.
class [[nodiscard]] Status {
public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool isOk() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  const std::string &message() const { return message_; }

  /// Prepends context ("while loading X: ") to an error; ok stays ok.
  Status withContext(const std::string &context) const {
    if (isOk())
      return *this;
    return Status(code_, context + ": " + message_);
  }

private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalidArgument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status notFound(std::string m) {
  return Status(StatusCode::kNotFound, std::move(m));
}
inline Status dataLoss(std::string m) {
  return Status(StatusCode::kDataLoss, std::move(m));
}
inline Status outOfRange(std::string m) {
  return Status(StatusCode::kOutOfRange, std::move(m));
}
inline Status resourceExhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
inline Status unimplemented(std::string m) {
  return Status(StatusCode::kUnimplemented, std::move(m));
}
inline Status internalError(std::string m) {
  return Status(StatusCode::kInternal, std::move(m));
}

/// A value or the Status that explains why there is none.
template <typename T> class [[nodiscard]] StatusOr {
public:
  StatusOr(Status status) : status_(std::move(status)) {
    assert(!status_.isOk() && "StatusOr built from an ok Status");
  }
  StatusOr(T value) : value_(std::move(value)) {}

  bool isOk() const { return status_.isOk(); }
  explicit operator bool() const { return isOk(); }
  const Status &status() const { return status_; }

  T &value() & {
    assert(isOk());
    return *value_;
  }
  const T &value() const & {
    assert(isOk());
    return *value_;
  }
  T &&value() && {
    assert(isOk());
    return std::move(*value_);
  }
  T *operator->() { return &value(); }
  const T *operator->() const { return &value(); }
  T &operator*() & { return value(); }
  const T &operator*() const & { return value(); }

private:
  Status status_;
  std::optional<T> value_;
};

} // namespace infer

#define INFER_STATUS_CONCAT_IMPL(a, b) a##b
#define INFER_STATUS_CONCAT(a, b) INFER_STATUS_CONCAT_IMPL(a, b)

/// Returns the Status of `expr` from the enclosing function if it is an error.
#define INFER_RETURN_IF_ERROR(expr)                                            \
  do {                                                                         \
    ::infer::Status _infer_status = (expr);                                    \
    if (!_infer_status.isOk())                                                 \
      return _infer_status;                                                    \
  } while (false)

/// `INFER_ASSIGN_OR_RETURN(auto x, f())`: binds the value or returns the error.
#define INFER_ASSIGN_OR_RETURN(lhs, expr)                                      \
  INFER_ASSIGN_OR_RETURN_IMPL(INFER_STATUS_CONCAT(_infer_or_, __LINE__), lhs,  \
                              expr)
#define INFER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                            \
  auto tmp = (expr);                                                           \
  if (!tmp.isOk())                                                             \
    return tmp.status();                                                       \
  lhs = std::move(tmp).value()

#endif // INFER_RUNTIME_SUPPORT_STATUS_H
