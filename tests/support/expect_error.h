// Checks that code throws mt::Error, and what the message says: every test's error-path helper.
//
//   EXPECT_MT_ERROR(a.view({4, 2}), "view", "[4, 2]");         // a statement, each part in the message
//   expect_error([&] { matmul(a, b); }, {"matmul", "inner"});  // the same for a callable
//   EXPECT_NE(error_message([&] { ... }).find("..."), npos);    // the message itself
//   catch_error([&] { ... })                                   // what was thrown, without asserting
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <initializer_list>
#include <string>

#include "mixtrain/error.h"

namespace mixtrain::testing {

struct Caught {
  bool is_mt_error = false;
  std::string message;  // the mt::Error's message, else what happened instead
};

// Runs f and reports whether it threw mt::Error, and the message.
template <typename F>
Caught catch_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {true, e.what()};
  } catch (const std::exception& e) {
    return {false, std::string("a non-mt::Error exception: ") + e.what()};
  }
  return {false, "no exception"};
}

// Expects fn() to throw mt::Error whose message contains every string in `parts`.
template <typename F>
void expect_error(F&& fn, std::initializer_list<std::string> parts) {
  const Caught c = catch_error(fn);
  if (!c.is_mt_error) {
    ADD_FAILURE() << "expected an mt::Error; got " << c.message;
    return;
  }
  for (const std::string& p : parts)
    EXPECT_NE(c.message.find(p), std::string::npos) << "'" << c.message << "' lacks '" << p << "'";
}

// The message of the mt::Error that f throws ("" and a test failure when it throws none).
template <typename F>
std::string error_message(F&& f) {
  const Caught c = catch_error(f);
  if (!c.is_mt_error) {
    ADD_FAILURE() << "expected an mt::Error; got " << c.message;
    return "";
  }
  return c.message;
}

}  // namespace mixtrain::testing

// EXPECT_MT_ERROR(statement, "part", ...): the statement throws mt::Error whose message holds every
// part (failures are reported at the caller's line).
#define EXPECT_MT_ERROR(stmt, ...)                                           \
  do {                                                                       \
    SCOPED_TRACE(#stmt);                                                     \
    ::mixtrain::testing::expect_error([&] { (void)(stmt); }, {__VA_ARGS__}); \
  } while (0)
