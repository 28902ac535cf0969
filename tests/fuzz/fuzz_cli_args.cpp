// libFuzzer harness: the mixtrain command line. The input is split at NUL bytes into at most 24
// arguments after "mixtrain"; they are parsed with the real app and, when the parse succeeds, put
// through the checks a subcommand makes before loading data. Nothing is trained; the only files read
// are the GPT-2 config.json files that --gpt2-config and --init-from name (bounded, parsed as hostile).
#include <mixtrain/error.h>

#include <string>
#include <vector>

#include "app.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"mixtrain"};
  std::string cur;
  for (size_t i = 0; i < size && args.size() < 25; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  if (args.size() < 25) args.push_back(cur);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  mixtrain::cli::Invocation inv;
  const auto app = mixtrain::cli::make_app(inv);
  try {
    app->parse(static_cast<int>(argv.size()), argv.data());
    mixtrain::cli::check_invocation(inv);
  } catch (const CLI::Error&) {
  } catch (const mixtrain::Error&) {
  } catch (const mixtrain::cli::UsageError&) {
  }
  return 0;
}
