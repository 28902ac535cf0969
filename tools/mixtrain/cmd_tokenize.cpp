// mixtrain tokenize: text files into llm.c token files with a model's BPE tokenizer
// (data::tokenize_files: streaming, multi-threaded, nothing half-written on failure).
#include <mixtrain/data/tokenize.h>
#include <mixtrain/text/tokenizer.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "commands.h"

namespace mixtrain::cli {

namespace {

struct TokenizeArgs {
  std::string tokenizer;
  std::string out;
  std::string val_out;
  double val_fraction = 0.0;
  std::vector<std::string> inputs;
  bool no_separator = false;
  std::string specials = "recognize";
  int threads = 0;
  bool overwrite = false;
};

CLI::App* add_tokenize_flags(CLI::App& app, TokenizeArgs& t) {
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Tokenize text files with a GPT-2 (byte-level BPE) tokenizer into llm.c token files for --data tokens:");
  cmd->add_option("--tokenizer", t.tokenizer,
                  "The tokenizer: a Hugging Face directory (tokenizer.json, or vocab.json + merges.txt), a "
                  "tokenizer.json file or a tiktoken rank file (*.tiktoken)")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--out", t.out, "The training token file to write (llm.c's format: a 1 KiB header, uint16 tokens)")
      ->required()
      ->check(non_empty());
  cmd->add_option("--val-out", t.val_out, "The validation token file (with --val-fraction)")->check(non_empty());
  cmd->add_option("--val-fraction", t.val_fraction,
                  "The first fraction of the input (in bytes, in order, cut between words) goes to --val-out")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  cmd->add_flag("--no-separator", t.no_separator,
                "Do not put <|endoftext|> before each input file (by default each file is a document preceded by "
                "it, as llm.c's data scripts write them)");
  cmd->add_option("--specials", t.specials,
                  "Special tokens' text in the input (\"<|endoftext|>\"): recognize (the special token, as "
                  "transformers' tokenizers do) or text (ordinary text, tiktoken's encode_ordinary)")
      ->check(CLI::IsMember({"recognize", "text"}))
      ->capture_default_str();
  cmd->add_option("--threads", t.threads, "Threads that encode (0: one per logical processor)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_flag("--overwrite", t.overwrite, "Replace existing output files");
  cmd->add_option("FILE", t.inputs, "Text files (UTF-8; any bytes are encoded exactly); each is one document")
      ->required()
      ->check(CLI::ExistingFile);
  return cmd;
}

void check_tokenize(const TokenizeArgs& t) {
  if (t.val_fraction > 0 && t.val_out.empty()) throw UsageError("--val-fraction needs --val-out FILE");
  if (!t.val_out.empty() && t.val_fraction <= 0) throw UsageError("--val-out needs --val-fraction F (0 < F <= 0.5)");
  if (!t.val_out.empty() && std::filesystem::absolute(t.val_out) == std::filesystem::absolute(t.out))
    throw UsageError("--out and --val-out name the same file");
}

int run_tokenize(const TokenizeArgs& t) {
  check_tokenize(t);
  for (const std::string& path : {t.out, t.val_out}) {
    std::error_code ec;
    if (!path.empty() && std::filesystem::exists(path, ec) && !t.overwrite)
      throw UsageError("'" + path + "' exists: pass --overwrite to replace it");
  }
  for (const std::string& path : {t.out, t.val_out}) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!path.empty() && !parent.empty()) std::filesystem::create_directories(parent);
  }
  const auto load_start = std::chrono::steady_clock::now();
  const text::Tokenizer tokenizer = text::Tokenizer::load(t.tokenizer);
  const auto start = std::chrono::steady_clock::now();
  std::printf("mixtrain tokenize: %zu file%s with %s (loaded in %.2f s)\n", t.inputs.size(),
              t.inputs.size() == 1 ? "" : "s", tokenizer.describe().c_str(),
              std::chrono::duration<double>(start - load_start).count());
  std::fflush(stdout);
  const bool terminal = isatty(fileno(stderr)) != 0;
  auto last = std::chrono::steady_clock::now();
  data::TokenizeOptions o;
  o.val_fraction = t.val_fraction;
  o.threads = t.threads;
  o.document_separator = !t.no_separator;
  o.specials = t.specials == "text" ? text::Specials::kAsText : text::Specials::kRecognize;
  // Progress on stderr, at most twice a second (in place on a terminal, a line every 10 s otherwise).
  o.progress = [&](uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last).count();
    if (since < (terminal ? 0.5 : 10.0) && done < total) return;
    last = now;
    const double elapsed = std::chrono::duration<double>(now - start).count();
    std::fprintf(stderr, "%s%.1f of %.1f MiB (%.0f%%), %.1f MiB/s%s", terminal ? "\r" : "", done / 1048576.0,
                 total / 1048576.0, total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
                 elapsed > 0 ? done / 1048576.0 / elapsed : 0.0, terminal ? "" : "\n");
  };
  const data::TokenizeResult r = data::tokenize_files(tokenizer, t.inputs, t.out, t.val_out, o);
  if (terminal) std::fprintf(stderr, "\n");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t tokens = r.train_tokens + r.val_tokens;
  std::printf("%lld documents, %.2f MiB, %lld tokens in %.3f s (%.2f MiB/s, %.0f tokens/s)\n",
              static_cast<long long>(r.documents), static_cast<double>(r.bytes) / 1048576.0,
              static_cast<long long>(tokens), seconds,
              seconds > 0 ? static_cast<double>(r.bytes) / 1048576.0 / seconds : 0.0,
              seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0);
  std::printf("wrote %s: %lld tokens\n", t.out.c_str(), static_cast<long long>(r.train_tokens));
  if (!t.val_out.empty()) std::printf("wrote %s: %lld tokens\n", t.val_out.c_str(), static_cast<long long>(r.val_tokens));
  return 0;
}

class TokenizeCommand final : public Command {
 public:
  CLI::App* add(CLI::App& app) override { return add_tokenize_flags(app, args_); }
  void check() const override { check_tokenize(args_); }
  bool computes() const override { return false; }
  int run() override { return run_tokenize(args_); }

 private:
  TokenizeArgs args_;
};

}  // namespace

std::unique_ptr<Command> make_tokenize_command() { return std::make_unique<TokenizeCommand>(); }

}  // namespace mixtrain::cli
