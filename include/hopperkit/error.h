// hopperkit: typed errors and the check macros that build them.
//
// Every check names the argument, the expected and the actual value; the message is built from the same
// values that the condition tests, so the two never disagree. Library code never exits or aborts: a failed
// check throws hopperkit::Error before anything is launched.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

namespace hopperkit {

enum class ErrorKind {
  kShape,        // wrong rank or extent
  kDtype,        // wrong element type
  kDevice,       // wrong device (CPU tensor, other GPU)
  kStride,       // unsupported stride / layout
  kAlignment,    // pointer or stride not aligned as required
  kValue,        // an out-of-range scalar argument
  kUnsupported,  // a valid but unsupported configuration
  kCuda,         // a CUDA runtime / driver call failed
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string arg, std::string expected, std::string actual, const char* file, int line);
  ErrorKind kind() const { return kind_; }
  const std::string& arg() const { return arg_; }
  const std::string& expected() const { return expected_; }
  const std::string& actual() const { return actual_; }

 private:
  ErrorKind kind_;
  std::string arg_, expected_, actual_;
};

namespace detail {
// Values in messages are formatted without iostreams (no locale machinery on the error path).
inline std::string to_str(const std::string& v) { return v; }
inline std::string to_str(const char* v) { return v ? std::string(v) : std::string("null"); }
inline std::string to_str(bool v) { return v ? "true" : "false"; }
template <typename T, typename std::enable_if<std::is_arithmetic<T>::value, int>::type = 0>
std::string to_str(T v) {
  return std::to_string(v);
}
[[noreturn]] void throw_error(ErrorKind kind, const std::string& arg, const std::string& expected,
                              const std::string& actual, const char* file, int line);
}  // namespace detail
}  // namespace hopperkit

// Throws unless `cond`; `expected` and `actual` are streamed into the message.
#define HK_CHECK(kind, cond, arg, expected, actual)                                                       \
  do {                                                                                                    \
    if (!(cond)) {                                                                                        \
      ::hopperkit::detail::throw_error(::hopperkit::ErrorKind::kind, (arg),                               \
                                       ::hopperkit::detail::to_str(expected),                             \
                                       ::hopperkit::detail::to_str(actual), __FILE__, __LINE__);          \
    }                                                                                                     \
  } while (0)

// Equality check: the message shows both values.
#define HK_CHECK_EQ(kind, arg, expected, actual) HK_CHECK(kind, (expected) == (actual), arg, expected, actual)

// Checks a CUDA runtime call; the argument is the call's text.
#define HK_CUDA_CHECK(call)                                                                               \
  do {                                                                                                    \
    cudaError_t hk_err_ = (call);                                                                         \
    if (hk_err_ != cudaSuccess) {                                                                         \
      (void)cudaGetLastError();                                                                           \
      ::hopperkit::detail::throw_error(::hopperkit::ErrorKind::kCuda, #call, "cudaSuccess",               \
                                       std::string(cudaGetErrorName(hk_err_)) + ": " +                    \
                                           cudaGetErrorString(hk_err_),                                   \
                                       __FILE__, __LINE__);                                               \
    }                                                                                                     \
  } while (0)

// Checks the launch that was just made (configuration errors surface here, not at the next sync).
#define HK_CHECK_LAUNCH(name) HK_CUDA_CHECK(cudaPeekAtLastError())
