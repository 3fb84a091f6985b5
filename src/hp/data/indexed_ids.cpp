// The largest token id of an indexed dataset (indexed_ids.h).
#include "hp/data/indexed_ids.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include "hp/core/error.h"
#include "hp/data/indexed.h"
#include "hp/io/json.h"

namespace hp::data {

namespace {

namespace fs = std::filesystem;

// What a record is valid for: the .bin's size in bytes and the token count.
io::JsonValue identity(const IndexedDataset& d) {
  std::error_code ec;
  const auto bytes = fs::file_size(indexed_bin_path(d.prefix()), ec);
  return io::JsonValue::object(
      {{"bin_bytes", ec ? int64_t{-1} : static_cast<int64_t>(bytes)}, {"tokens", d.num_tokens()}});
}

// The token stream position of sequence s's first element.
int64_t sequence_start(const IndexedDataset& d, int64_t s) {
  return s >= d.num_sequences() ? d.num_tokens()
                                : d.sequence_pointer(s) / indexed_dtype_size(d.dtype());
}

// Document and offset of stream position p: the sequence holding it (binary search over the
// pointers), then the last document starting at or before that sequence.
void locate(const IndexedDataset& d, MaxTokenId& m) {
  int64_t lo = 0, hi = d.num_sequences() - 1;  // last sequence starting at or before p
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (sequence_start(d, mid) <= m.position)
      lo = mid;
    else
      hi = mid - 1;
  }
  int64_t dlo = 0, dhi = d.num_documents() - 1;
  while (dlo < dhi) {
    const int64_t mid = (dlo + dhi + 1) / 2;
    if (d.document_index(mid) <= lo)
      dlo = mid;
    else
      dhi = mid - 1;
  }
  m.document = dlo;
  m.offset = m.position - sequence_start(d, d.document_index(dlo));
}

std::optional<MaxTokenId> read_record(const IndexedDataset& d) {
  const std::string path = indexed_ids_path(d.prefix());
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::optional<io::Json> j = io::try_parse_json(text, path);
  if (!j || !j->contains("for") || !j->contains("max_id") ||
      j->at("for").dump() != identity(d).dump(-1, io::KeyOrder::sorted))
    return std::nullopt;
  const io::Json m = j->at("max_id");
  return MaxTokenId{m.get_int("id"), m.get_int("position"), m.get_int("document"),
                    m.get_int("offset")};
}

}  // namespace

std::string indexed_ids_path(const std::string& prefix) {
  return prefix + ".ids.json";
}

MaxTokenId scan_max_token_id(const IndexedDataset& d) {
  MaxTokenId m;
  std::vector<int64_t> buf(size_t{1} << 20);
  for (int64_t at = 0; at < d.num_tokens(); at += int64_t(buf.size())) {
    const int64_t n = std::min<int64_t>(int64_t(buf.size()), d.num_tokens() - at);
    d.read(at, n, buf.data());
    const auto it = std::max_element(buf.begin(), buf.begin() + n);  // the first of the largest
    if (*it > m.id) m.id = *it, m.position = at + (it - buf.begin());
  }
  if (m.id >= 0) locate(d, m);
  return m;
}

bool write_max_token_id(const IndexedDataset& d, const MaxTokenId& m) {
  const std::string path = indexed_ids_path(d.prefix()), tmp = path + ".tmp";
  const io::JsonValue j =
      io::JsonValue::object({{"for", identity(d)},
                             {"max_id", io::JsonValue::object({{"id", m.id},
                                                               {"position", m.position},
                                                               {"document", m.document},
                                                               {"offset", m.offset}})}});
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump(-1, io::KeyOrder::sorted) << "\n";
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) std::remove(tmp.c_str());
  return !ec;
}

MaxTokenId max_token_id(const IndexedDataset& d, bool* scanned) {
  if (std::optional<MaxTokenId> r = read_record(d)) {
    if (scanned) *scanned = false;
    return *r;
  }
  const MaxTokenId m = scan_max_token_id(d);
  write_max_token_id(d, m);
  if (scanned) *scanned = true;
  return m;
}

}  // namespace hp::data
