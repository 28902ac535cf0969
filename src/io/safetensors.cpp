// safetensors reader and atomic writer (see mixtrain/io/safetensors.h for the format and the
// validation rules).
#include "mixtrain/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "kernels/copy.h"
#include "io/json_input.h"
#include "mixtrain/io/file.h"

namespace mixtrain::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swapping here");

namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

[[noreturn]] void fail_at(const char* who, const std::string& path, uint64_t offset, const std::string& what) {
  MT_FAIL(who, ": '", path, "': ", what, " (at byte offset ", offset, ")");
}

// The reference implementation's dtype enum order (BOOL < U8 < ... < F16 < BF16 < I32 < F32 < F64 <
// I64); files are written in descending order of this rank, then by name.
int reference_rank(DType t) {
  switch (t) {
    case kBool: return 0;
    case kUInt8: return 1;
    case kFloat16: return 7;
    case kBFloat16: return 8;
    case kInt32: return 9;
    case kFloat32: return 11;
    case kFloat64: return 12;
    case kInt64: return 13;
  }
  return -1;
}

bool dtype_from_string(const std::string& s, DType* out) {
  for (const DTypeInfo& i : kDTypeInfo)
    if (i.safetensors == s) {
      *out = i.dtype;
      return true;
    }
  return false;
}

SafetensorsHeader parse_header(const char* who, const std::string& path, const ReadFile& file) {
  SafetensorsHeader h;
  h.file_bytes = file.size();
  if (file.size() < 8)
    fail_at(who, path, file.size(),
            detail::concat("file has ", file.size(), " bytes, too short for the 8-byte header length"));
  unsigned char len_bytes[8];
  file.read_at(len_bytes, 8, 0);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kSafetensorsMaxHeaderBytes)
    fail_at(who, path, 0,
            detail::concat("header length ", n, " exceeds the limit of ", kSafetensorsMaxHeaderBytes, " bytes"));
  if (n > file.size() - 8)
    fail_at(who, path, 0,
            detail::concat("header length ", n, " runs past the end of the file (", file.size(), " bytes)"));
  h.header_bytes = n;
  h.data_start = 8 + n;
  const uint64_t data_size = file.size() - h.data_start;

  std::string text(n, '\0');
  file.read_at(text.data(), n, 8);
  // Nesting deeper than the format's (top object > entry > shape array) and a key given twice in
  // any object (a tensor, a field of an entry, a metadata key) are errors.
  const json root = parse_untrusted_json(text, 3, [&](uint64_t pos, const std::string& what) {
    fail_at(who, path, 8 + pos, "JSON header: " + what);
  });
  if (!root.is_object()) fail_at(who, path, 8, "the JSON header is not an object");
  // The format pads the header with spaces (0x20) only: any other byte after the closing brace
  // (a newline, a tab) is not a safetensors header, whatever JSON allows.
  if (const size_t end = text.find_last_not_of(' '); end == std::string::npos || text[end] != '}')
    fail_at(who, path, 8 + (end == std::string::npos ? 0 : end),
            "JSON header: only spaces may follow the closing brace (the format's padding)");

  for (auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail_at(who, path, 8, "__metadata__ is not an object");
      for (auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          fail_at(who, path, 8, "__metadata__ value of " + detail::quote_untrusted(mk) + " is not a string");
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    // JSON values carry no positions; point at the entry's key where it can be found in the text.
    const size_t key_at = text.find(json(key).dump());
    const uint64_t entry_offset = 8 + (key_at == std::string::npos ? 0 : key_at);
    const std::string quoted = detail::quote_untrusted(key);
    auto bad = [&](const std::string& what) { fail_at(who, path, entry_offset, "tensor " + quoted + ": " + what); };
    if (!value.is_object()) bad("entry is not an object");
    SafetensorsEntry e;
    e.name = key;
    auto dt = value.find("dtype");
    if (dt == value.end() || !dt->is_string()) bad("missing dtype");
    if (!dtype_from_string(dt->get<std::string>(), &e.dtype))
      bad("unsupported dtype " + detail::quote_untrusted(dt->get<std::string>()) +
          " (supported: F32, F16, BF16, F64, I64, I32, U8, BOOL)");
    auto sh = value.find("shape");
    if (sh == value.end() || !sh->is_array()) bad("missing shape");
    if (sh->size() > static_cast<size_t>(kMaxDims))
      bad(detail::concat("shape has ", sh->size(), " dims, mixtrain supports at most ", kMaxDims));
    for (const json& d : *sh) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        bad("shape entries must be non-negative integers, got " + describe_json(d));
      e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    // Strides multiply every dim (a zero dim counts as one), so that product must fit in int64 even
    // when the element count is 0: [2^62, 2^62, 0] holds nothing but has no valid strides.
    constexpr unsigned __int128 kSaturate = static_cast<unsigned __int128>(1) << 64;
    unsigned __int128 span = 1, numel = 1;
    for (int64_t d : e.shape) {
      span = std::min(span * static_cast<uint64_t>(std::max<int64_t>(d, 1)), kSaturate);
      numel = std::min(numel * static_cast<uint64_t>(d), kSaturate);
    }
    if (span > static_cast<unsigned __int128>(INT64_MAX))
      bad(detail::concat("shape ", e.shape, " has more elements than a 64-bit index can address"));
    auto off = value.find("data_offsets");
    if (off == value.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      bad("data_offsets must be two non-negative integers");
    e.begin = (*off)[0].get<uint64_t>();
    e.end = (*off)[1].get<uint64_t>();
    if (e.begin > e.end) bad(detail::concat("data_offsets [", e.begin, ", ", e.end, "] are reversed"));
    if (e.end > data_size)
      fail_at(who, path, h.data_start + std::min(e.begin, data_size),
              detail::concat("tensor ", quoted, " has data_offsets [", e.begin, ", ", e.end,
                             "] past the end of the data section (", data_size,
                             " bytes): the file is truncated or the offsets are wrong"));
    const unsigned __int128 nbytes = numel * element_size(e.dtype);
    if (nbytes != e.end - e.begin)
      fail_at(
          who, path, h.data_start + e.begin,
          detail::concat("tensor ", quoted, " of shape ", e.shape, " and dtype ", dt->get<std::string>(), " needs ",
                         nbytes >= kSaturate ? std::string("over 2^64") : std::to_string(static_cast<uint64_t>(nbytes)),
                         " bytes, but data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin));
    h.tensors.push_back(std::move(e));
  }

  // The tensors must tile the data section: sorted by offset, each starts where the previous ended
  // and the last ends at the end of the file.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const std::string* prev = nullptr;
  for (const SafetensorsEntry& e : h.tensors) {
    if (e.begin < pos)
      fail_at(who, path, h.data_start + e.begin,
              detail::concat("tensor ", detail::quote_untrusted(e.name), " [", e.begin, ", ", e.end,
                             ") overlaps tensor ", detail::quote_untrusted(*prev)));
    if (e.begin > pos)
      fail_at(who, path, h.data_start + pos,
              detail::concat("gap of ", e.begin - pos, " unused bytes before tensor ", detail::quote_untrusted(e.name)));
    pos = e.end;
    prev = &e.name;
  }
  if (pos != data_size)
    fail_at(who, path, h.data_start + pos,
            detail::concat(data_size - pos, " trailing bytes after the last tensor (the data section has ", data_size,
                           " bytes, the tensors cover ", pos, ")"));
  return h;
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  std::vector<std::pair<std::string, Tensor>> sorted = tensors;
  std::set<std::string> names;
  for (const auto& [name, t] : sorted) {
    MT_CHECK(!name.empty(), "save_safetensors: '", path, "': empty tensor name");
    MT_CHECK(name != "__metadata__", "save_safetensors: '", path,
             "': '__metadata__' is reserved and cannot name a tensor");
    MT_CHECK(names.insert(name).second, "save_safetensors: '", path, "': duplicate tensor name '", name, "'");
    MT_CHECK(t.defined(), "save_safetensors: '", path, "': tensor '", name, "' is undefined");
  }
  // Written from host copies: a tensor on another device is copied once, here.
  for (auto& [name, t] : sorted) t = t.detach().to(Device{});
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    int ra = reference_rank(a.second.dtype()), rb = reference_rank(b.second.dtype());
    return ra != rb ? ra > rb : a.first < b.first;
  });

  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : sorted) {
    ordered_json entry = ordered_json::object();
    entry["dtype"] = std::string(info(t.dtype()).safetensors);
    entry["shape"] = t.shape().vec();
    entry["data_offsets"] = {offset, offset + t.nbytes()};
    offset += t.nbytes();
    header[name] = std::move(entry);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ordered_json::type_error& e) {
    MT_FAIL("save_safetensors: '", path, "': a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  MT_CHECK(text.size() <= kSafetensorsMaxHeaderBytes, "save_safetensors: '", path, "': the header would be ",
           text.size(), " bytes, above the format's limit of ", kSafetensorsMaxHeaderBytes);

  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  AtomicFile file(path, "save_safetensors");
  file.write(len_bytes, 8);
  file.write(text.data(), text.size());
  for (const auto& [name, t] : sorted) {
    // Contiguous bytes without going through autograd (a parameter that requires grad is data here).
    Tensor c = t;
    if (!t.is_contiguous()) {
      c = Tensor::empty(t.shape(), t.dtype(), t.device());
      kernels::copy(c, t);
    }
    file.write(c.raw_data(), c.nbytes());
  }
  file.commit();
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  ReadFile file(path, "read_safetensors_header");
  return parse_header("read_safetensors_header", path, file);
}

SafetensorsFile load_safetensors(const std::string& path) { return load_safetensors(path, nullptr); }

SafetensorsFile load_safetensors(const std::string& path, const SafetensorsSelect& select) {
  const char* who = "load_safetensors";
  ReadFile file(path, who);
  SafetensorsHeader h = parse_header(who, path, file);
  std::vector<bool> wanted(h.tensors.size(), true);
  if (select) {
    wanted = select(h);
    MT_INTERNAL_ASSERT(wanted.size() == h.tensors.size(), "select returned ", wanted.size(), " flags for ",
                       h.tensors.size(), " entries");
  }
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    if (!wanted[i]) continue;
    SafetensorsEntry& e = h.tensors[i];
    Tensor t = Tensor::empty(e.shape, e.dtype);
    file.read_at(t.raw_data(), e.end - e.begin, h.data_start + e.begin);
    if (e.dtype == kBool) {
      // Any byte but 0 or 1 in a C++ bool is undefined behaviour: reject it here.
      const unsigned char* p = static_cast<const unsigned char*>(t.raw_data());
      for (uint64_t b = 0; b < e.end - e.begin; ++b)
        if (p[b] > 1)
          fail_at(who, path, h.data_start + e.begin + b,
                  detail::concat("tensor ", detail::quote_untrusted(e.name), " (BOOL) holds byte ", int(p[b]),
                                 "; BOOL bytes must be 0 or 1"));
    }
    out.tensors.emplace(std::move(e.name), std::move(t));
  }
  return out;
}

}  // namespace mixtrain::io
