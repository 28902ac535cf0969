#include "mixtrain/error.h"

namespace mixtrain::detail {

// User errors carry only the message: the file and line of the check mean nothing to a caller.
void throw_error(const char* /*file*/, int /*line*/, const std::string& msg) { throw Error(msg); }

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(concat("internal error (a bug in mixtrain, please report it): ", cond, " failed at ", file,
                     ":", line, msg.empty() ? "" : ": ", msg));
}

}  // namespace mixtrain::detail
