// The mixtrain command line as a CLI11 app (see app.h).
#include "app.h"

#include <mixtrain/error.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace mixtrain::cli {

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

namespace {

// CLI11 reads integers with strtoull/strtoll in base 0 and doubles with strtold: "-1" becomes
// 18446744073709551615 for an unsigned flag, 2^64 saturates, "010" is octal 8, "" may read as 0.
// Every numeric flag of every command therefore first passes this check of its text: decimal, in
// the target's range, finite. It is added to each option by its CLI11 type, so a new flag is
// covered without being named here.
std::string strict_number_error(const std::string& text, const std::string& kind) {
  const std::string shown = mixtrain::detail::quote_untrusted(text);
  if (text.empty()) return "an empty value is not a number";
  if (kind == "FLOAT") {
    const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
      return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+';
    });
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(text.c_str(), &end);
    if (!plain || end != text.c_str() + text.size()) return shown + " is not a decimal number";
    if (errno == ERANGE && std::abs(v) > 1.0) return shown + " is out of range";
    if (!std::isfinite(v)) return shown + " is not finite";
    return {};
  }
  const bool negative = text[0] == '-';
  const std::string digits = negative ? text.substr(1) : text;
  if (negative && kind == "UINT") return shown + " is negative; expected a non-negative integer";
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return shown + " is not a decimal integer";
  if (digits.size() > 1 && digits[0] == '0') return shown + ": write the integer without leading zeros";
  // Fits in 64 bits (the flag's own range, when narrower, is checked by its other validators and by
  // CLI11's conversion).
  const std::string limit = kind == "UINT" ? "18446744073709551615" : negative ? "9223372036854775808" : "9223372036854775807";
  if (digits.size() > limit.size() || (digits.size() == limit.size() && digits > limit))
    return shown + " is out of range (at most " + (negative ? "-" : "") + limit + ")";
  return {};
}

void require_strict_numbers(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    const std::string kind = type.substr(0, type.find_first_of(": "));
    if (kind != "UINT" && kind != "INT" && kind != "FLOAT") continue;
    opt->check(CLI::Validator([kind](std::string& value) { return strict_number_error(value, kind); }, ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) require_strict_numbers(*sub);
}

}  // namespace

std::unique_ptr<CLI::App> make_app(Invocation& inv) {
  auto app = std::make_unique<CLI::App>(
      "mixtrain: mixed-precision (fp32 / bf16 / fp16 / fp8) training on the CPU, an NVIDIA GPU (--device cuda) or "
      "the checked debugging device (--device checked)",
      "mixtrain");
  app->require_subcommand(1);
  // A flag given twice keeps its last value, so wrappers can override their defaults
  // (scripts/demo.sh --epochs 1). Subcommands inherit this; list options opt out.
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app->failure_message([](const CLI::App*, const CLI::Error& e) {
    return "mixtrain: error: " + one_line(e.what()) + " (see --help)\n";
  });
#define MIXTRAIN_ADD_COMMAND(name) inv.commands.push_back(make_##name##_command());
  MIXTRAIN_COMMANDS(MIXTRAIN_ADD_COMMAND)
#undef MIXTRAIN_ADD_COMMAND
  for (const auto& c : inv.commands) inv.apps.push_back(c->add(*app));
  require_strict_numbers(*app);
  return app;
}

Command* Invocation::chosen() const {
  for (size_t i = 0; i < commands.size(); ++i)
    if (apps[i]->parsed()) return commands[i].get();
  return nullptr;
}

void check_invocation(const Invocation& inv) {
  if (const Command* c = inv.chosen()) c->check();
}

}  // namespace mixtrain::cli
