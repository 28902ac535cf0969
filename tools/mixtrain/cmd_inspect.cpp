// mixtrain inspect: the tensors and metadata of a safetensors file (weights or checkpoint).
#include <mixtrain/io/checkpoint.h>
#include <mixtrain/io/safetensors.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "commands.h"

namespace mixtrain::cli {

namespace {

CLI::App* add_inspect_flags(CLI::App& app, std::string& file) {
  CLI::App* cmd =
      app.add_subcommand("inspect", "List the tensors (name, dtype, shape, size) and metadata of a safetensors file");
  cmd->add_option("FILE", file, "A .safetensors file (model.safetensors, a checkpoint, any safetensors file)")
      ->required()
      ->check(CLI::ExistingFile);
  return cmd;
}

int run_inspect(const std::string& file) {
  // Only the header is read (validated as hostile input); tensor data is never loaded.
  const io::SafetensorsHeader h = io::read_safetensors_header(file);
  // Names and metadata come from the file: escaped (\n, \x1b, ...) so that they cannot forge lines
  // or drive the terminal.
  int64_t elements = 0;
  size_t name_w = 4, shape_w = 5;
  std::vector<std::string> shapes, names;
  for (const io::SafetensorsEntry& e : h.tensors) {
    elements += e.shape.numel();
    std::ostringstream s;
    s << e.shape;
    shapes.push_back(s.str());
    names.push_back(detail::escape_untrusted(e.name));
    name_w = std::max(name_w, names.back().size());
    shape_w = std::max(shape_w, shapes.back().size());
  }
  const bool checkpoint = h.metadata.contains(io::kCheckpointVersionKey);
  std::printf("%s: %s, %zu tensors, %lld elements, %s of data (header %llu bytes)\n",
              detail::escape_untrusted(file).c_str(),
              checkpoint ? "mixtrain training checkpoint" : "safetensors", h.tensors.size(),
              static_cast<long long>(elements), human_bytes(static_cast<double>(h.file_bytes - h.data_start)).c_str(),
              static_cast<unsigned long long>(h.header_bytes));
  std::printf("\n%-*s  %-8s  %-*s  %12s\n", static_cast<int>(name_w), "name", "dtype", static_cast<int>(shape_w),
              "shape", "size");
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const io::SafetensorsEntry& e = h.tensors[i];
    std::printf("%-*s  %-8s  %-*s  %12s\n", static_cast<int>(name_w), names[i].c_str(),
                std::string(to_string(e.dtype)).c_str(), static_cast<int>(shape_w), shapes[i].c_str(),
                human_bytes(static_cast<double>(e.end - e.begin)).c_str());
  }
  std::printf("\nmetadata (%zu entries)%s\n", h.metadata.size(), h.metadata.empty() ? ": none" : ":");
  for (const auto& [key, value] : h.metadata)
    std::printf("  %s = %s\n", detail::escape_untrusted(key).c_str(), detail::escape_untrusted(value).c_str());
  return 0;
}

class InspectCommand final : public Command {
 public:
  CLI::App* add(CLI::App& app) override { return add_inspect_flags(app, file_); }
  bool computes() const override { return false; }
  int run() override { return run_inspect(file_); }

 private:
  std::string file_;
};

}  // namespace

std::unique_ptr<Command> make_inspect_command() { return std::make_unique<InspectCommand>(); }

}  // namespace mixtrain::cli
