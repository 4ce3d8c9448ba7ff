// Errors as values: `status` and `expected<T>`, for the pure core (no exceptions
// cross a layer). Every message names the thing that is wrong and what to do.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace tune {

enum class errc {
  ok = 0,
  invalid_argument,  // bad input: the caller must change the request
  insufficient,      // valid, but the resources are not free now: retry later
  infeasible,        // valid, but no node could ever hold it
  not_found,         // an id that is not known
  already_exists,    // an id that is taken
  inconsistent,      // a release or commit that does not match what is held
};

const char* to_string(errc code);

class status {
 public:
  status() = default;
  status(errc code, std::string message) : code_(code), message_(std::move(message)) {}

  static status ok() { return {}; }
  bool is_ok() const { return code_ == errc::ok; }
  explicit operator bool() const { return is_ok(); }
  errc code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  errc code_ = errc::ok;
  std::string message_;
};

// Either a T or a non-ok status. Access to the wrong alternative is a bug (asserted).
template <class T>
class expected {
 public:
  expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  expected(status err) : v_(std::move(err)) { assert(!std::get<status>(v_).is_ok()); }
  expected(errc code, std::string message) : v_(status{code, std::move(message)}) {}

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & { assert(has_value()); return std::get<0>(v_); }
  const T& value() const& { assert(has_value()); return std::get<0>(v_); }
  T&& value() && { assert(has_value()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const status& error() const { assert(!has_value()); return std::get<1>(v_); }

  // The value, or `fallback` when there is none.
  template <class U>
  T value_or(U&& fallback) const& {
    return has_value() ? std::get<0>(v_) : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  std::variant<T, status> v_;
};

}  // namespace tune
