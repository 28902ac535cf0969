// The Trainer's output directory (see run_directory.h): which files are a run's, when a run may write
// into a directory that holds files, and the pruning of old checkpoints and of resumed metrics.
#include "train/run_directory.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <system_error>
#include <vector>

#include "mixtrain/error.h"

namespace mixtrain::train::detail {

namespace fs = std::filesystem;

namespace {

// Files a run writes into out_dir (checkpoint-<step>.safetensors aside).
// config.json: a gpt2 run writes its model in Hugging Face's layout (TrainerOptions::save_model).
constexpr const char* kRunFiles[] = {"metrics.jsonl", "summary.json", "model.safetensors", "checkpoint.safetensors",
                                     "config.json"};

// The step of "checkpoint-<step>.safetensors", or -1 for another name.
int64_t periodic_checkpoint_step(const std::string& name) {
  constexpr std::string_view kPrefix = "checkpoint-", kSuffix = ".safetensors";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.rfind(kPrefix, 0) != 0 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
    return -1;
  const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

bool is_run_file(const std::string& name) {
  return periodic_checkpoint_step(name) >= 0 ||
         std::any_of(std::begin(kRunFiles), std::end(kRunFiles), [&](const char* f) { return name == f; });
}

}  // namespace

std::string periodic_checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("checkpoint-" + std::to_string(step) + ".safetensors")).string();
}

io::AppendFile truncate_metrics(const std::string& path, int64_t step) {
  std::string kept;
  if (fs::exists(path)) {
    // Lines are short JSON objects; the file grows by about 100 bytes a step.
    std::istringstream in(io::read_file(path, uint64_t{1} << 32, "Trainer"));
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      // Unparsable lines (a crash mid-write) and lines past the checkpoint are dropped.
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= step)
        kept += line + '\n';
    }
  }
  io::write_file_atomic(path, kept, "Trainer");
  return io::AppendFile(path, "Trainer");
}

void prepare_out_dir(const std::string& out_dir, bool overwrite, const std::string& resumed_from,
                     int64_t resumed_step) {
  const fs::path dir(out_dir);
  fs::create_directories(dir);
  io::remove_stale_temp_files(dir.string());
  // This run's own directory when it resumes from a checkpoint that lies in it.
  bool own = false;
  if (!resumed_from.empty()) {
    std::error_code ec;
    fs::path parent = fs::path(resumed_from).parent_path();
    own = fs::equivalent(parent.empty() ? fs::path(".") : parent, dir, ec);
  }
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!io::is_temp_file_name(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  if (own) {
    // Periodic checkpoints past the resumed step belong to the continuation this run replaces.
    for (const std::string& name : names)
      if (periodic_checkpoint_step(name) > resumed_step) fs::remove(dir / name);
  } else if (!names.empty()) {
    if (!overwrite) {
      std::string list;
      for (size_t i = 0; i < names.size() && i < 4; ++i)
        list += (i ? ", " : "") + mixtrain::detail::escape_untrusted(names[i]);
      if (names.size() > 4) list += mixtrain::detail::concat(" and ", names.size() - 4, " more");
      MT_FAIL("Trainer: the output directory '", mixtrain::detail::escape_untrusted(dir.string()),
              "' already holds files (", list, "): it belongs to another run. Choose an empty directory, resume ",
              "that run from its checkpoint, or replace its files (overwrite, --overwrite)");
    }
    for (const std::string& name : names)
      if (is_run_file(name)) fs::remove(dir / name);
  }
}

void remove_old_checkpoints(const std::string& dir, int64_t keep) {
  std::vector<int64_t> steps;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const int64_t k = periodic_checkpoint_step(e.path().filename().string());
    if (k >= 0) steps.push_back(k);
  }
  std::sort(steps.begin(), steps.end());
  const auto kept = static_cast<size_t>(keep);
  for (size_t i = 0; i + kept < steps.size(); ++i) fs::remove(periodic_checkpoint_path(dir, steps[i]));
}

}  // namespace mixtrain::train::detail
