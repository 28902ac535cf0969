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
// The files a run writes (--overwrite replaces another run's): the Trainer's, and those a model
// with a layout of its own writes beside its weights, as save_pretrained does (the CLI's gpt2: its
// config.json and its tokenizer).
constexpr const char* kRunFiles[] = {"metrics.jsonl",         "summary.json", "model.safetensors",
                                     "checkpoint.safetensors", "config.json",  "vocab.json",
                                     "merges.txt",             "tokenizer.json", "tokenizer_config.json",
                                     "special_tokens_map.json"};

constexpr std::string_view kSafetensors = ".safetensors";
constexpr std::string_view kShardInfix = ".zero-";

// The checkpoint file a ZeRO-1 shard name belongs to ("checkpoint-40.safetensors" for
// "checkpoint-40.zero-1-of-2.safetensors"), "" for any other name.
std::string shard_owner(const std::string& name) {
  const size_t at = name.find(kShardInfix);
  if (at == std::string::npos || name.size() < kSafetensors.size() ||
      name.compare(name.size() - kSafetensors.size(), kSafetensors.size(), kSafetensors) != 0)
    return "";
  const std::string owner = name.substr(0, at) + std::string(kSafetensors);
  return owner == "checkpoint.safetensors" || periodic_checkpoint_step(owner) >= 0 ? owner : "";
}

// Removes checkpoint file `name` of `dir` and its shards.
void remove_checkpoint(const fs::path& dir, const std::string& name) {
  std::vector<fs::path> doomed;  // collected first: removing while iterating is unspecified
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (shard_owner(e.path().filename().string()) == name) doomed.push_back(e.path());
  for (const fs::path& p : doomed) fs::remove(p);
  fs::remove(dir / name);
}

// TensorBoard's event files (io/event_file.h): every run and resumed attempt writes one.
constexpr std::string_view kEventFilePrefix = "events.out.tfevents.";

bool is_run_file(const std::string& name) {
  return periodic_checkpoint_step(name) >= 0 || !shard_owner(name).empty() || name.starts_with(kEventFilePrefix) ||
         std::any_of(std::begin(kRunFiles), std::end(kRunFiles), [&](const char* f) { return name == f; });
}

}  // namespace

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


std::string zero_shard_path(const std::string& checkpoint_path, int rank, int world) {
  std::string stem = checkpoint_path;
  if (stem.size() >= kSafetensors.size() &&
      stem.compare(stem.size() - kSafetensors.size(), kSafetensors.size(), kSafetensors) == 0)
    stem.resize(stem.size() - kSafetensors.size());
  return mixtrain::detail::concat(stem, kShardInfix, rank, "-of-", world, kSafetensors);
}

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
    if (!io::is_temp_file_name(name) && name != io::kDirectoryLockFile) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  if (own) {
    // Periodic checkpoints past the resumed step belong to the continuation this run replaces.
    for (const std::string& name : names)
      if (periodic_checkpoint_step(name) > resumed_step) remove_checkpoint(dir, name);
    // Shards of a checkpoint whose writing was interrupted (its file never appeared).
    for (const std::string& name : names)
      if (periodic_checkpoint_step(shard_owner(name)) > resumed_step && fs::exists(dir / name)) fs::remove(dir / name);
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

void remove_stale_shards(const std::string& checkpoint_path, int world) {
  const fs::path path(checkpoint_path);
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const std::string name = path.filename().string();
  const std::string keep_suffix = mixtrain::detail::concat("-of-", world, kSafetensors);
  std::vector<fs::path> doomed;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string file = e.path().filename().string();
    if (shard_owner(file) != name) continue;
    const bool ours = world > 0 && file.size() > keep_suffix.size() &&
                      file.compare(file.size() - keep_suffix.size(), keep_suffix.size(), keep_suffix) == 0;
    if (!ours) doomed.push_back(e.path());
  }
  for (const fs::path& p : doomed) fs::remove(p, ec);
}

void remove_old_checkpoints(const std::string& dir, int64_t keep) {
  std::vector<int64_t> steps;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const int64_t k = periodic_checkpoint_step(e.path().filename().string());
    if (k >= 0) steps.push_back(k);
  }
  std::sort(steps.begin(), steps.end());
  const auto kept = static_cast<size_t>(keep);
  for (size_t i = 0; i + kept < steps.size(); ++i)
    remove_checkpoint(dir, fs::path(periodic_checkpoint_path(dir, steps[i])).filename().string());
}

}  // namespace mixtrain::train::detail
