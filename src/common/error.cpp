// hopperkit: typed errors.
#include "hopperkit/error.h"

namespace hopperkit {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kShape: return "shape";
    case ErrorKind::kDtype: return "dtype";
    case ErrorKind::kDevice: return "device";
    case ErrorKind::kStride: return "stride";
    case ErrorKind::kAlignment: return "alignment";
    case ErrorKind::kValue: return "value";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kCuda: return "cuda";
  }
  return "unknown";
}

static std::string format_message(ErrorKind kind, const std::string& arg, const std::string& expected,
                                  const std::string& actual, const char* file, int line) {
  std::string where = file ? std::string(file) : std::string("?");
  size_t slash = where.find_last_of('/');
  if (slash != std::string::npos) where = where.substr(slash + 1);
  return std::string("hopperkit ") + error_kind_name(kind) + " error: '" + arg + "': expected " + expected +
         ", got " + actual + " (" + where + ":" + std::to_string(line) + ")";
}

Error::Error(ErrorKind kind, std::string arg, std::string expected, std::string actual, const char* file,
             int line)
    : std::runtime_error(format_message(kind, arg, expected, actual, file, line)),
      kind_(kind),
      arg_(std::move(arg)),
      expected_(std::move(expected)),
      actual_(std::move(actual)) {}

namespace detail {
void throw_error(ErrorKind kind, const std::string& arg, const std::string& expected, const std::string& actual,
                 const char* file, int line) {
  throw Error(kind, arg, expected, actual, file, line);
}
}  // namespace detail
}  // namespace hopperkit
