#include "gnuplot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

extern char** environ;

namespace mixtrain::cli {

namespace fs = std::filesystem;

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const fs::path p = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return {};
}

bool run_gnuplot(const std::string& script, const std::string& png) {
  const std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty()) {
    std::printf("gnuplot not found: no %s (install gnuplot-nox; the script is %s)\n", png.c_str(), script.c_str());
    return false;
  }
  const std::string tmp = png + ".plotting";
  const std::string out_arg = "out='" + tmp + "'";
  char* argv[] = {const_cast<char*>(gnuplot.c_str()), const_cast<char*>("-e"), const_cast<char*>(out_arg.c_str()),
                  const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  int status = 0;
  std::error_code ec;
  if (::posix_spawn(&pid, gnuplot.c_str(), nullptr, nullptr, argv, environ) != 0 || ::waitpid(pid, &status, 0) < 0 ||
      !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("gnuplot failed: no %s (script: %s)\n", png.c_str(), script.c_str());
    fs::remove(tmp, ec);
    return false;
  }
  fs::rename(tmp, png, ec);
  return !ec;
}

}  // namespace mixtrain::cli
