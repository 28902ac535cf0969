// The BPE model: the vocabulary (token bytes <-> id), the merge table (left id, right id) -> (rank,
// merged id), and the merging of one piece's bytes into token ids.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mixtrain/text/tokenizer.h"

namespace mixtrain::text {

inline constexpr uint32_t kNoRank = UINT32_MAX;
inline constexpr TokenId kNoToken = UINT32_MAX;

// Limits on what a file may hold (tokenizer.h).
inline constexpr size_t kMaxTokens = size_t{1} << 20;   // ids below this too
inline constexpr size_t kMaxTokenBytes = 256;
inline constexpr uint64_t kMaxFileBytes = uint64_t{64} << 20;

struct Merge {
  TokenId left, right;
  uint32_t rank;
  TokenId merged;
};

class Bpe {
 public:
  // How a piece that is a whole token is encoded. kWholeToken: as that token, always (tiktoken,
  // and Hugging Face's ignore_merges); kMerges: by its merges, as Hugging Face's BPE does (the
  // whole-token lookup is still taken for the tokens whose merges give themselves, which finish()
  // finds once).
  enum class WholePieces { kWholeToken, kMerges };

  // Adds a token; returns false when the id or the bytes are taken already.
  bool add_token(TokenId id, std::string bytes);
  // The id of a token's bytes, or kNoToken.
  TokenId find(std::string_view bytes) const;
  // Adds a merge; false when the pair is there already.
  bool add_merge(TokenId left, TokenId right, uint32_t rank, TokenId merged);
  // After the last add: the byte tokens (the name of the first missing byte in `missing`, returned
  // false) and the whole-piece flags.
  bool finish(WholePieces whole, int* missing_byte);

  void encode_piece(std::string_view piece, std::vector<TokenId>& out) const;

  bool has(TokenId id) const { return id < present_.size() && present_[id]; }
  const std::string& bytes(TokenId id) const { return tokens_[id]; }
  size_t id_limit() const { return tokens_.size(); }  // largest id + 1
  size_t num_tokens() const { return count_; }
  // Every merge, by rank (then by the length of the left part).
  std::vector<Merge> merges() const;
  WholePieces whole_pieces() const { return whole_; }

 private:
  struct PairSlot {
    uint64_t key = UINT64_MAX;
    uint32_t rank = kNoRank;
    TokenId merged = kNoToken;
  };
  const PairSlot* find_pair(TokenId a, TokenId b) const;
  void grow_pairs();
  void grow_vocab();
  void merge_bytes(std::string_view piece, std::vector<TokenId>& out) const;
  void merge_long(std::string_view piece, std::vector<TokenId>& out) const;

  std::vector<std::string> tokens_;    // by id ("" where no token has the id)
  std::vector<uint8_t> present_;       // by id
  std::vector<uint8_t> whole_ok_;      // by id: encoding the token's bytes gives the token
  std::vector<uint32_t> vocab_slots_;  // open addressing: id + 1, 0 empty
  std::vector<PairSlot> pair_slots_;
  size_t count_ = 0, pairs_ = 0;
  std::array<TokenId, 256> byte_token_{};
  WholePieces whole_ = WholePieces::kMerges;
};

}  // namespace mixtrain::text
