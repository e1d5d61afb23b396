// latentkv/error.h: the one error system of latentkv.
//
// Every failure is a latentkv::Error (a std::runtime_error) carrying the file, the line and the
// offending values. Library code never calls exit(); bindings translate Error into their own
// exceptions (ValueError/TypeError in Python, a non-zero exit status in the CLI).
#pragma once

#include <charconv>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace latentkv {

// Which kind of mistake an error reports; bindings map kinds to exception types.
enum class ErrorKind {
  kValue,     // a value out of range (shape, index, size)
  kType,      // wrong dtype or device
  kRuntime,   // CUDA failure, allocation failure
  kNotBuilt,  // a backend, or a backend's path for these inputs, that this build does not contain
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {

// Messages are built with std::to_chars and string appends rather than iostreams: formatting
// through a locale-aware ostream inside a Python extension module has been seen to crash on some
// toolchains, and error paths must never crash.
inline void append_one(std::string& s, const char* v) { s += v; }
inline void append_one(std::string& s, const std::string& v) { s += v; }
inline void append_one(std::string& s, std::string_view v) { s += v; }
inline void append_one(std::string& s, char v) { s += v; }
template <typename T>
void append_one(std::string& s, const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    s += v ? "1" : "0";  // what an ostream prints
  } else if constexpr (std::is_integral_v<T>) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof(buf), v);
    s.append(buf, r.ptr);
  } else if constexpr (std::is_floating_point_v<T>) {
    char buf[48];
    const int n = std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));  // an ostream's default
    s.append(buf, n > 0 ? static_cast<size_t>(n) : 0);
  } else if constexpr (std::is_pointer_v<T> && !std::is_convertible_v<T, std::string_view>) {
    char buf[32];
    const int n = std::snprintf(buf, sizeof(buf), "%p", static_cast<const void*>(v));
    s.append(buf, n > 0 ? static_cast<size_t>(n) : 0);
  } else {
    static_assert(std::is_convertible_v<const T&, std::string_view>, "unsupported message part");
    s += std::string_view(v);
  }
}

inline void append(std::string&) {}
template <typename T, typename... Rest>
void append(std::string& s, const T& v, const Rest&... rest) {
  append_one(s, v);
  append(s, rest...);
}

template <typename... Args>
[[noreturn]] void raise(ErrorKind kind, const char* file, int line, const Args&... args) {
  std::string msg;
  append(msg, args...);
  append(msg, " [", file, ":", line, "]");
  throw Error(kind, msg);
}

}  // namespace detail
}  // namespace latentkv

// LKV_CHECK(cond, parts...): throws a value error made of the streamed parts when cond is false.
// Use it for everything a caller can get wrong; name the value in the message.
#define LKV_CHECK(cond, ...)                                                                    \
  do {                                                                                          \
    if (!(cond)) ::latentkv::detail::raise(::latentkv::ErrorKind::kValue, __FILE__, __LINE__, \
                                           __VA_ARGS__);                                        \
  } while (0)

#define LKV_CHECK_TYPE(cond, ...)                                                              \
  do {                                                                                         \
    if (!(cond)) ::latentkv::detail::raise(::latentkv::ErrorKind::kType, __FILE__, __LINE__, \
                                           __VA_ARGS__);                                       \
  } while (0)

#define LKV_FAIL(kind, ...) ::latentkv::detail::raise(kind, __FILE__, __LINE__, __VA_ARGS__)
