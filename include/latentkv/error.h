// latentkv/error.h: the one error system of latentkv.
//
// Every failure is a latentkv::Error (a std::runtime_error) carrying the file, the line and the
// offending values. Library code never calls exit(); bindings translate Error into their own
// exceptions (ValueError/TypeError in Python, a non-zero exit status in the CLI).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace latentkv {

// Which kind of mistake an error reports; bindings map kinds to exception types.
enum class ErrorKind {
  kValue,     // a value out of range (shape, index, size)
  kType,      // wrong dtype or device
  kRuntime,   // CUDA failure, allocation failure
  kNotBuilt,  // a backend that this build does not contain
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {

inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}

template <typename... Args>
[[noreturn]] void raise(ErrorKind kind, const char* file, int line, const Args&... args) {
  std::ostringstream os;
  append(os, args...);
  os << " [" << file << ":" << line << "]";
  throw Error(kind, os.str());
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
