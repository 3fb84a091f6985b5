// The largest token id of an indexed dataset (data/indexed.h) and where it first occurs, so that a
// dataset whose ids do not fit the model's vocabulary is refused when it is opened, not when a
// batch holding such an id is read.
//
// `hp data prepare` records it in PREFIX.ids.json after publishing the dataset; a dataset without
// that record (written by Megatron's tools, or a prepare stopped between the two) is scanned once
// when opened and the result cached there, as the shuffle index is cached beside the data (not
// cached, only used, where that file cannot be written). The record holds the .bin size and token
// count it was made for; one that does not match is stale and rescanned.
#pragma once

#include <cstdint>
#include <string>

namespace hp::data {

class IndexedDataset;

struct MaxTokenId {
  int64_t id = -1;       // the largest id; -1 for an empty dataset
  int64_t position = 0;  // its first occurrence in the token stream (.bin front to back)
  int64_t document = 0;  // the document holding it (as the index counts documents)
  int64_t offset = 0;    // its position within that document
};

std::string indexed_ids_path(const std::string& prefix);  // PREFIX.ids.json

// One pass over PREFIX.bin (memory-bound), 1 Mi tokens at a time.
MaxTokenId scan_max_token_id(const IndexedDataset& d);
// Writes PREFIX.ids.json for `d` (temporary file + rename); false when it cannot be written.
bool write_max_token_id(const IndexedDataset& d, const MaxTokenId& m);
// PREFIX.ids.json when it matches d, else scan_max_token_id, cached there (best effort).
// *scanned (optional) says which.
MaxTokenId max_token_id(const IndexedDataset& d, bool* scanned = nullptr);

}  // namespace hp::data
