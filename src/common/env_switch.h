// hopperkit: the profiling switches read from the environment (HOPPERKIT_*; not for serving). Each caller reads
// its switch once per process (a function-local static), so a switch set after the first call has no effect.
#pragma once

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace hopperkit {

// The integer in `name`: `fallback` when unset, not a whole decimal integer, or outside [lo, hi].
inline int env_int(const char* name, int fallback, int lo = INT_MIN, int hi = INT_MAX) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < lo || n > hi) return fallback;
  return static_cast<int>(n);
}

// Whether `name` is set (to anything, even empty).
inline bool env_set(const char* name) { return std::getenv(name) != nullptr; }

// Whether `name` is set to exactly `value`.
inline bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

}  // namespace hopperkit
