// Byte-pair merging of one piece (bpe.h).
#include "text/bpe.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "mixtrain/error.h"

namespace mixtrain::text {

namespace {

// A fast hash of a short byte string (8 bytes at a time, multiply-xorshift mixing).
inline uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xC2B2AE3D27D4EB4Full);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x9FB21C651E98DF25ull;
    h ^= h >> 29;
  }
  if (i < s.size()) {
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = (h ^ w) * 0x9FB21C651E98DF25ull;
    h ^= h >> 29;
  }
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

inline uint64_t pair_key(TokenId a, TokenId b) { return (uint64_t{a} << 32) | b; }
inline uint64_t hash_pair(uint64_t k) {
  k *= 0x9E3779B97F4A7C15ull;
  return k ^ (k >> 31);
}

// Pieces up to this many bytes merge in arrays (quadratic, but no allocation and cache-resident);
// longer ones with a heap over a linked list.
constexpr size_t kShortPiece = 64;

}  // namespace

bool Bpe::add_token(TokenId id, std::string bytes) {
  if (id >= kMaxTokens) return false;
  if (find(bytes) != kNoToken) return false;
  if (id >= tokens_.size()) {
    tokens_.resize(id + 1);
    present_.resize(id + 1, 0);
  }
  if (present_[id]) return false;
  tokens_[id] = std::move(bytes);
  present_[id] = 1;
  ++count_;
  if (2 * count_ > vocab_slots_.size()) {
    grow_vocab();
  } else {
    const size_t mask = vocab_slots_.size() - 1;
    for (size_t i = hash_bytes(tokens_[id]) & mask;; i = (i + 1) & mask)
      if (vocab_slots_[i] == 0) {
        vocab_slots_[i] = id + 1;
        break;
      }
  }
  return true;
}

void Bpe::grow_vocab() {
  size_t n = std::max<size_t>(64, vocab_slots_.size() * 2);
  while (n < 2 * count_) n *= 2;
  vocab_slots_.assign(n, 0);
  const size_t mask = n - 1;
  for (TokenId id = 0; id < tokens_.size(); ++id) {
    if (!present_[id]) continue;
    for (size_t i = hash_bytes(tokens_[id]) & mask;; i = (i + 1) & mask)
      if (vocab_slots_[i] == 0) {
        vocab_slots_[i] = id + 1;
        break;
      }
  }
}

TokenId Bpe::find(std::string_view bytes) const {
  if (vocab_slots_.empty()) return kNoToken;
  const size_t mask = vocab_slots_.size() - 1;
  for (size_t i = hash_bytes(bytes) & mask;; i = (i + 1) & mask) {
    const uint32_t s = vocab_slots_[i];
    if (s == 0) return kNoToken;
    const std::string& t = tokens_[s - 1];
    if (t.size() == bytes.size() && std::memcmp(t.data(), bytes.data(), t.size()) == 0) return s - 1;
  }
}

void Bpe::grow_pairs() {
  std::vector<PairSlot> old = std::move(pair_slots_);
  size_t n = std::max<size_t>(64, old.size() * 2);
  while (n < 2 * pairs_) n *= 2;
  pair_slots_.assign(n, PairSlot{});
  const size_t mask = n - 1;
  for (const PairSlot& s : old) {
    if (s.key == UINT64_MAX) continue;
    for (size_t i = hash_pair(s.key) & mask;; i = (i + 1) & mask)
      if (pair_slots_[i].key == UINT64_MAX) {
        pair_slots_[i] = s;
        break;
      }
  }
}

const Bpe::PairSlot* Bpe::find_pair(TokenId a, TokenId b) const {
  const uint64_t key = pair_key(a, b);
  const size_t mask = pair_slots_.size() - 1;
  for (size_t i = hash_pair(key) & mask;; i = (i + 1) & mask) {
    const PairSlot& s = pair_slots_[i];
    if (s.key == key) return &s;
    if (s.key == UINT64_MAX) return nullptr;
  }
}

bool Bpe::add_merge(TokenId left, TokenId right, uint32_t rank, TokenId merged) {
  if (pair_slots_.empty() || 2 * (pairs_ + 1) > pair_slots_.size()) grow_pairs();
  const uint64_t key = pair_key(left, right);
  const size_t mask = pair_slots_.size() - 1;
  for (size_t i = hash_pair(key) & mask;; i = (i + 1) & mask) {
    PairSlot& s = pair_slots_[i];
    if (s.key == key) return false;
    if (s.key == UINT64_MAX) {
      s = {key, rank, merged};
      ++pairs_;
      return true;
    }
  }
}

std::vector<Merge> Bpe::merges() const {
  std::vector<Merge> out;
  out.reserve(pairs_);
  for (const PairSlot& s : pair_slots_)
    if (s.key != UINT64_MAX)
      out.push_back({static_cast<TokenId>(s.key >> 32), static_cast<TokenId>(s.key), s.rank, s.merged});
  std::sort(out.begin(), out.end(), [&](const Merge& a, const Merge& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    return tokens_[a.left].size() < tokens_[b.left].size();
  });
  return out;
}

bool Bpe::finish(WholePieces whole, int* missing_byte) {
  if (pair_slots_.empty()) grow_pairs();
  if (vocab_slots_.empty()) grow_vocab();
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_token_[b] = find(std::string_view(&c, 1));
    if (byte_token_[b] == kNoToken) {
      *missing_byte = b;
      return false;
    }
  }
  whole_ = whole;
  whole_ok_.assign(tokens_.size(), 0);
  std::vector<TokenId> ids;
  for (TokenId id = 0; id < tokens_.size(); ++id) {
    if (!present_[id]) continue;
    if (whole == WholePieces::kWholeToken) {
      whole_ok_[id] = 1;
      continue;
    }
    ids.clear();
    merge_bytes(tokens_[id], ids);
    whole_ok_[id] = ids.size() == 1 && ids[0] == id;
  }
  return true;
}

void Bpe::encode_piece(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.empty()) return;
  if (piece.size() <= kMaxTokenBytes) {
    const TokenId id = find(piece);
    if (id != kNoToken && whole_ok_[id]) {
      out.push_back(id);
      return;
    }
  }
  merge_bytes(piece, out);
}

void Bpe::merge_bytes(std::string_view piece, std::vector<TokenId>& out) const {
  const size_t n = piece.size();
  if (n == 1) {
    out.push_back(byte_token_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (n > kShortPiece) {
    merge_long(piece, out);
    return;
  }
  // ids[i] the parts; rank[i], merged[i]: the merge of parts i and i+1 (kNoRank: none).
  TokenId ids[kShortPiece];
  uint32_t rank[kShortPiece];
  TokenId merged[kShortPiece];
  size_t m = n;
  for (size_t i = 0; i < n; ++i) ids[i] = byte_token_[static_cast<unsigned char>(piece[i])];
  auto set_pair = [&](size_t i) {
    const PairSlot* s = find_pair(ids[i], ids[i + 1]);
    rank[i] = s ? s->rank : kNoRank;
    merged[i] = s ? s->merged : kNoToken;
  };
  for (size_t i = 0; i + 1 < m; ++i) set_pair(i);
  while (m > 1) {
    size_t best = 0;
    uint32_t best_rank = rank[0];
    for (size_t i = 1; i + 1 < m; ++i)
      if (rank[i] < best_rank) {  // strict: the leftmost of equal ranks
        best_rank = rank[i];
        best = i;
      }
    if (best_rank == kNoRank) break;
    ids[best] = merged[best];
    const size_t tail = m - best - 2;  // parts after best + 1
    std::memmove(ids + best + 1, ids + best + 2, tail * sizeof(TokenId));
    std::memmove(rank + best + 1, rank + best + 2, (tail > 0 ? tail - 1 : 0) * sizeof(uint32_t));
    std::memmove(merged + best + 1, merged + best + 2, (tail > 0 ? tail - 1 : 0) * sizeof(TokenId));
    --m;
    if (best + 1 < m) set_pair(best);
    if (best > 0) set_pair(best - 1);
  }
  out.insert(out.end(), ids, ids + m);
}

// Long pieces: parts in a doubly linked list, candidate merges in a min-heap by (rank, position of
// the left part), checked against the list when popped (a merge invalidates its neighbours' entries).
void Bpe::merge_long(std::string_view piece, std::vector<TokenId>& out) const {
  const size_t n = piece.size();
  std::vector<TokenId> ids(n);
  std::vector<uint32_t> prev(n), next(n);
  constexpr uint32_t kEnd = UINT32_MAX;
  for (size_t i = 0; i < n; ++i) {
    ids[i] = byte_token_[static_cast<unsigned char>(piece[i])];
    prev[i] = i == 0 ? kEnd : static_cast<uint32_t>(i - 1);
    next[i] = i + 1 == n ? kEnd : static_cast<uint32_t>(i + 1);
  }
  struct Cand {
    uint32_t rank, pos;
    TokenId left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](uint32_t i) {
    if (i == kEnd || next[i] == kEnd) return;
    const PairSlot* s = find_pair(ids[i], ids[next[i]]);
    if (s) heap.push({s->rank, i, ids[i], ids[next[i]], s->merged});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<uint32_t>(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const uint32_t j = next[c.pos];
    // Stale when a part was merged away or changed since (ids only grow longer: a part that still has
    // both ids is this pair).
    if (ids[c.pos] != c.left || j == kEnd || ids[j] != c.right) continue;
    ids[c.pos] = c.merged;
    ids[j] = kNoToken;  // removed
    next[c.pos] = next[j];
    if (next[j] != kEnd) prev[next[j]] = c.pos;
    push(c.pos);
    if (prev[c.pos] != kEnd) push(prev[c.pos]);
  }
  for (uint32_t i = 0; i != kEnd; i = next[i]) out.push_back(ids[i]);
}

}  // namespace mixtrain::text
