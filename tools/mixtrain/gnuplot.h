// Running gnuplot for the tool's plots (compare's loss curves, train's numerics report).
#pragma once

#include <string>

namespace mixtrain::cli {

// The path of an executable `name` found on PATH, or "".
std::string find_on_path(const std::string& name);

// Runs `gnuplot -e "out='<png>.plotting'" script` and renames the image over `png` once gnuplot has
// succeeded (a failed or killed plot never leaves half an image). Prints why and returns false when
// gnuplot is missing or fails.
bool run_gnuplot(const std::string& script, const std::string& png);

}  // namespace mixtrain::cli
