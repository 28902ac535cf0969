// mixtrain/data/tokenize.h: text files to llm.c token files (data/token_file.h) with a tokenizer
// (text/tokenizer.h), streaming: inputs of any size in bounded memory, encoded in parallel.
//
// Each input file is one document, preceded by <|endoftext|> when document_separator is set (as
// llm.c's data scripts do). The inputs are read as one stream in bounded blocks (block_bytes, at
// most one per thread in memory at once), each cut at a text::safe_cut, so every block encodes
// exactly as it would inside the whole text: the output is the same for any thread count and block
// size, and equal to encoding each file at once. The exception: a stretch of 64 MiB without a safe
// cut (no "x y" or "x\ny" with printable ASCII on both sides: say, 64 MiB of text in a script
// without spaces) is cut where it ends and encoded as it is.
//
// The first val_fraction of the input bytes goes to val_out instead, cut at a safe place at or before
// that byte (at the start of its file when there is none), as llm.c puts its first tokens in the
// validation split. Both outputs are written by TokenFileWriter: nothing half-written stays behind on
// an error (the targets keep their previous contents). Special tokens' text in a file
// ("<|endoftext|>") is encoded as `specials` says: kAsText (ordinary text, as llm.c's
// encode_ordinary does; the default) or kRecognize (the special token: documents already separated
// in one file stay separate). Ids must be below 65536.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "mixtrain/text/tokenizer.h"

namespace mixtrain::data {

struct TokenizeOptions {
  double val_fraction = 0;           // in [0, 1); must be 0 when val_out is ""
  int threads = 0;                   // 0: std::thread::hardware_concurrency()
  bool document_separator = true;    // <|endoftext|> before each file; an error if the tokenizer has none
  uint64_t block_bytes = 1 << 20;    // read granularity, 1 byte to 64 MiB
  text::Specials specials = text::Specials::kAsText;
  // Called from the calling thread after each batch of blocks, and once at the end.
  std::function<void(uint64_t bytes_done, uint64_t bytes_total)> progress;
};

struct TokenizeResult {
  int64_t train_tokens = 0, val_tokens = 0, documents = 0;
  uint64_t bytes = 0;
};

// Tokenizes `inputs` (regular files, read in order) into train_out and val_out ("" for none).
// mt::Error naming the file for an unreadable input, a token id that does not fit the format, or
// options out of range.
TokenizeResult tokenize_files(const text::Tokenizer& tok, std::span<const std::string> inputs,
                              const std::string& train_out, const std::string& val_out,
                              const TokenizeOptions& options);

}  // namespace mixtrain::data
