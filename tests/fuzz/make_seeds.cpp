// Writes the seed corpora of the fuzz harnesses into tests/fuzz/corpus/<harness>/ (argv[1] is the
// corpus directory). Run it again when a format changes:
//   build-fuzz/tests/fuzz/mixtrain_make_fuzz_seeds tests/fuzz/corpus
// The checkpoint seeds come from the run fuzz_checkpoint.cpp resumes (same model, data, options).
#include <mixtrain/mixtrain.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace mt = mixtrain;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string gzip(const std::string& bytes) {
  z_stream zs{};
  deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, bytes.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// The 8-byte little-endian length that opens a safetensors file.
std::string le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* d : {"safetensors", "checkpoint", "idx", "text", "cli_args", "event_file"})
    fs::create_directories(root / d);

  // safetensors: every dtype, metadata, an empty file's worth of header.
  mt::io::save_safetensors((root / "safetensors" / "dtypes.safetensors").string(),
                           mt::io::NamedTensors{{"f32", mt::arange(0, 6).reshape({2, 3})},
                                                {"f16", mt::ones({3}, {.dtype = mt::kFloat16})},
                                                {"bf16", mt::ones({2, 1}, {.dtype = mt::kBFloat16})},
                                                {"f64", mt::zeros({1}, {.dtype = mt::kFloat64})},
                                                {"i64", mt::zeros({2}, {.dtype = mt::kInt64})},
                                                {"i32", mt::zeros({2}, {.dtype = mt::kInt32})},
                                                {"u8", mt::zeros({3}, {.dtype = mt::kUInt8})},
                                                {"b", mt::zeros({2}, {.dtype = mt::kBool})},
                                                {"empty", mt::zeros({0, 4})},
                                                {"scalar", mt::zeros({})}},
                           {{"format", "pt"}, {"note", "seed"}});
  mt::io::save_safetensors((root / "safetensors" / "empty.safetensors").string(), mt::io::NamedTensors{});
  // A number past double's range (nlohmann reports it as out_of_range, not as a parse error).
  const std::string overflow = R"({"a":{"dtype":"U8","shape":[1e999],"data_offsets":[0,1]}})";
  write(root / "safetensors" / "number-overflow.safetensors", le64(overflow.size()) + overflow + "x");
  // A NUL byte and garbage after the header's object (the JSON parser must not stop at the NUL).
  const std::string nul_tail = std::string(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})") +
                               std::string("\0garbage}{", 10);
  write(root / "safetensors" / "nul-tail.safetensors", le64(nul_tail.size()) + nul_tail + std::string(4, '\0'));

  // checkpoint: the fuzz_checkpoint run after 2 and 5 steps (periodic and final checkpoints).
  {
    const fs::path dir = fs::temp_directory_path() / "mixtrain-fuzz-seeds";
    fs::remove_all(dir);
    const mt::data::SyntheticDataset data(32, {4}, 3, /*seed=*/1);
    mt::manual_seed(1);
    mt::nn::Sequential model(mt::nn::Linear(4, 8), mt::nn::ReLU(), mt::nn::Dropout(0.1), mt::nn::Linear(8, 3));
    mt::train::TrainerOptions o;
    o.precision = {.precision = mt::train::Precision::kFp16};
    o.batch_size = 8;
    o.max_steps = 5;
    o.seed = 3;
    o.out_dir = dir.string();
    o.checkpoint_every = 2;
    mt::train::Trainer trainer(model, mt::train::adamw(1e-2, 0.01), data, nullptr, o);
    trainer.fit();
    fs::copy_file(dir / "checkpoint-2.safetensors", root / "checkpoint" / "step2.safetensors",
                  fs::copy_options::overwrite_existing);
    fs::copy_file(dir / "checkpoint.safetensors", root / "checkpoint" / "final.safetensors",
                  fs::copy_options::overwrite_existing);
    // The final checkpoint without one moment: a valid file whose state is incomplete.
    mt::io::SafetensorsFile f = mt::io::load_safetensors((dir / "checkpoint.safetensors").string());
    f.tensors.erase("optim.0.exp_avg_sq");
    mt::io::save_safetensors((root / "checkpoint" / "missing-moment.safetensors").string(), f.tensors, f.metadata);
    fs::remove_all(dir);
  }

  // idx: uint8 images, int32, float32 and float64 vectors, plain and gzip.
  const std::string images = std::string("\0\0\x08\x03", 4) + be32(2) + be32(3) + be32(3) + std::string(18, '\x7f');
  const std::string ints = std::string("\0\0\x0c\x01", 4) + be32(2) + be32(1) + be32(0xffffffffu);
  const std::string floats = std::string("\0\0\x0d\x01", 4) + be32(1) + be32(0x3f800000u);
  const std::string doubles = std::string("\0\0\x0e\x01", 4) + be32(1) + be32(0x3ff00000u) + be32(0);
  write(root / "idx" / "images", images);
  write(root / "idx" / "images.gz", gzip(images));
  write(root / "idx" / "ints", ints);
  write(root / "idx" / "floats.gz", gzip(floats));
  write(root / "idx" / "doubles", doubles);
  write(root / "idx" / "two_members.gz", gzip(images.substr(0, 10)) + gzip(images.substr(10)));

  // text: the first byte holds the knobs (see fuzz_text.cpp).
  write(root / "text" / "ascii", std::string("\x10") + "the quick brown fox jumps over the lazy dog\n");
  write(root / "text" / "utf8", std::string("\x05") + "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93\n");
  write(root / "text" / "strided", std::string("\xc6") + std::string(64, 'a') + std::string(64, 'b'));

  // event_file: what EventFileWriter writes (scalars with fixed times, a session start); the file
  // names it picks (time, host, pid) are not kept.
  {
    const fs::path logs = root / "event_file" / "logs";
    {
      mt::io::EventFileWriter w(logs.string());
      w.add_scalars(1, {{"train/loss", 2.5}, {"train/lr", 0.001}, {"eval/accuracy", 0.0}}, 1700000000.5);
      w.add_scalars(2, {{"train/loss", std::numeric_limits<double>::quiet_NaN()}}, 1700000001.0);
      w.start_session(2);
      w.add_scalars(2, {{"train/loss", 2.25}, {"train/step_ms", 12.75}}, 1700000002.0);
      fs::rename(w.path(), root / "event_file" / "scalars");
    }
    {
      mt::io::EventFileWriter w(logs.string());
      fs::rename(w.path(), root / "event_file" / "version_only");
    }
    fs::remove(logs);
  }

  // cli_args: NUL-separated arguments after "mixtrain".
  const std::vector<std::vector<std::string>> lines = {
      {"train", "--model", "cnn", "--data", "synthetic:64", "--precision", "fp16", "--steps", "3"},
      {"train", "--model", "gpt", "--data", "text:/nonexistent", "--resume", "auto", "--resume-override", "lr,seed"},
      {"compare", "--precisions", "fp32,bf16", "--epochs", "2", "--master-weights", "same", "--overwrite"},
      {"bench", "--model", "gpt", "--embed", "64", "--json", "--threads", "1"},
      {"train", "--on-nonfinite", "skip", "--lr", "1e30", "--keep-checkpoints", "2", "--checkpoint-every", "5"},
      {"inspect", "/dev/null"},
      {"--help"},
  };
  int k = 0;
  for (const auto& line : lines) {
    std::string bytes;
    for (size_t i = 0; i < line.size(); ++i) bytes += (i ? std::string(1, '\0') : "") + line[i];
    write(root / "cli_args" / ("args" + std::to_string(k++)), bytes);
  }
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
