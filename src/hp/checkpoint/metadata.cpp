// metadata.json of a DCP step dir: writing, strict reading, and the invariants both sides check.
#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "hp/checkpoint/crc32c.h"
#include "hp/checkpoint/dcp_detail.h"
#include "hp/core/error.h"
#include "hp/io/json.h"

namespace hp::checkpoint {

namespace {

constexpr const char* kChecksumKey = "metadata_crc32c";

// CRC32C of the canonical body (dcp.h read_metadata): `doc` without the checksum key, compact,
// keys sorted. Writer and reader both hash a parsed document, so the file's layout never matters.
uint32_t body_crc32c(io::JsonValue doc) {
  doc.erase(kChecksumKey);
  const std::string body = doc.dump(-1, io::KeyOrder::sorted);
  return crc32c(body.data(), body.size());
}

}  // namespace

namespace detail {

void validate_tensor(const TensorMeta& t, const std::string& source) {
  const size_t nd = t.global_shape.size();
  for (int64_t d : t.global_shape)
    if (d < 0)
      HP_THROW(IoError, "ckpt", source, ": tensor '", t.fqn, "': negative dimension in shape ",
               shape_str(t.global_shape));
  int64_t covered = 0;
  for (size_t i = 0; i < t.pieces.size(); ++i) {
    const TensorMeta::Piece& p = t.pieces[i];
    const std::string where = hp::detail::cat("tensor '", t.fqn, "' pieces[", i, "]");
    if (p.offsets.size() != nd || p.sizes.size() != nd)
      HP_THROW(IoError, "ckpt", source, ": ", where, ": offsets ", shape_str(p.offsets),
               " / sizes ", shape_str(p.sizes), " do not match the rank of shape ",
               shape_str(t.global_shape));
    for (size_t d = 0; d < nd; ++d)
      if (p.offsets[d] < 0 || p.sizes[d] < 0 || p.offsets[d] + p.sizes[d] > t.global_shape[d])
        HP_THROW(IoError, "ckpt", source, ": ", where, ": box offsets ", shape_str(p.offsets),
                 " sizes ", shape_str(p.sizes), " exceeds shape ", shape_str(t.global_shape));
    const uint64_t bytes = static_cast<uint64_t>(box_numel(p.sizes)) * dtype_size(t.dtype);
    if (p.end < p.begin || p.end - p.begin != bytes)
      HP_THROW(IoError, "ckpt", source, ": ", where, ": byte range [", p.begin, ", ", p.end,
               ") does not hold ", bytes, " bytes (sizes ", shape_str(p.sizes), " of ",
               dtype_name(t.dtype), ")");
    if (p.file.empty() || p.file.find('/') != std::string::npos || p.file == "." || p.file == "..")
      HP_THROW(IoError, "ckpt", source, ": ", where, ": file '", p.file,
               "' is not a plain file name");
    // Pairwise: piece counts are a few per rank, so this stays cheap next to the I/O.
    std::vector<int64_t> o, l;
    for (size_t j = 0; j < i; ++j)
      if (intersect(p.offsets, p.sizes, t.pieces[j].offsets, t.pieces[j].sizes, &o, &l))
        HP_THROW(IoError, "ckpt", source, ": ", where, " (offsets ", shape_str(p.offsets),
                 " sizes ", shape_str(p.sizes), ") overlaps pieces[", j, "] (offsets ",
                 shape_str(t.pieces[j].offsets), " sizes ", shape_str(t.pieces[j].sizes), ")");
    covered += box_numel(p.sizes);
  }
  if (covered != shape_numel(t.global_shape))
    HP_THROW(IoError, "ckpt", source, ": tensor '", t.fqn, "': its pieces cover ", covered, " of ",
             shape_numel(t.global_shape), " elements of shape ", shape_str(t.global_shape));
}

std::string metadata_to_json(const Metadata& meta) {
  io::JsonValue j;
  j["format"] = "hp-dcp";
  j["version"] = kFormatVersion;
  j["step"] = meta.step;
  j["world_size"] = meta.world_size;
  j["trainer_state"] = io::parse_json_value(meta.trainer_state_json, "trainer state");
  io::JsonValue tensors = io::JsonValue::object();
  for (const TensorMeta& t : meta.tensors) {
    io::JsonValue pieces = io::JsonValue::array();
    for (const TensorMeta::Piece& p : t.pieces)
      pieces.push_back(
          io::JsonValue::object({{"offsets", p.offsets},
                                 {"sizes", p.sizes},
                                 {"file", p.file},
                                 {"byte_range", io::JsonValue::array({p.begin, p.end})},
                                 {"crc32c", p.crc32c}}));
    tensors[t.fqn] = io::JsonValue::object(
        {{"dtype", dtype_name(t.dtype)}, {"shape", t.global_shape}, {"pieces", std::move(pieces)}});
  }
  j["tensors"] = std::move(tensors);
  j[kChecksumKey] = body_crc32c(j);
  return j.dump(1) + "\n";
}

}  // namespace detail

namespace {

[[noreturn]] void bad(const io::Json& node, std::string_view what) {
  HP_THROW(IoError, "ckpt", node.file(), ": ", node.path().empty() ? "(root)" : node.path(), ": ",
           what);
}

void check_keys(const io::Json& node, std::initializer_list<std::string_view> allowed) {
  if (!node.is_object()) bad(node, hp::detail::cat("expected an object, got ", node.type_name()));
  for (const auto& [key, value] : node.items())
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      bad(value, "unknown key '" + key + "'");
}

std::vector<int64_t> int_list(const io::Json& node) {
  if (!node.is_array()) bad(node, hp::detail::cat("expected an array, got ", node.type_name()));
  std::vector<int64_t> v;
  for (const io::Json& e : node.elements()) v.push_back(e.as_int());
  return v;
}

TensorMeta::Piece read_piece(const io::Json& p) {
  check_keys(p, {"offsets", "sizes", "file", "byte_range", "crc32c"});
  TensorMeta::Piece piece;
  piece.offsets = int_list(p.at("offsets"));
  piece.sizes = int_list(p.at("sizes"));
  piece.file = p.get_string("file");
  const io::Json range = p.at("byte_range");
  if (!range.is_array() || range.size() != 2) bad(range, "expected [begin, end]");
  piece.begin = range.at(0).as_uint();
  piece.end = range.at(1).as_uint();
  const uint64_t crc = p.at("crc32c").as_uint();
  if (crc > 0xFFFFFFFFu) bad(p.at("crc32c"), hp::detail::cat(crc, " is not a 32-bit checksum"));
  piece.crc32c = static_cast<uint32_t>(crc);
  return piece;
}

// Strict parse; read_metadata() adjusts the error prefix.
Metadata parse_metadata(const std::string& step_dir) {
  const io::Json root = io::read_json_file(step_dir + "/" + detail::kMetadataFile);
  // First, so a damaged file is reported as such rather than by whatever key the damage hit.
  if (root.is_object())
    if (const std::optional<io::Json> stored = root.find(kChecksumKey)) {
      const uint64_t want = stored->as_uint();
      const uint32_t got = body_crc32c(root.value());
      if (want != got)
        HP_THROW(IoError, "ckpt", root.file(), ": checksum mismatch (", kChecksumKey, " ", want,
                 ", the content hashes to ", got, "): the file is corrupted or was edited");
    }
  check_keys(root,
             {"format", "version", "step", "world_size", "trainer_state", "tensors", kChecksumKey});
  if (root.get_string("format") != "hp-dcp")
    bad(root.at("format"), "expected \"hp-dcp\", got \"" + root.get_string("format") + "\"");
  if (root.get_int("version") != detail::kFormatVersion)
    bad(root.at("version"), hp::detail::cat("unsupported version ", root.get_int("version"),
                                            " (this build reads ", detail::kFormatVersion, ")"));
  Metadata meta;
  meta.dir = step_dir;
  meta.step = root.get_int("step");
  if (meta.step < 0) bad(root.at("step"), hp::detail::cat("negative step ", meta.step));
  meta.world_size = root.get_int("world_size");
  if (meta.world_size < 1)
    bad(root.at("world_size"), hp::detail::cat("bad world size ", meta.world_size));
  const io::Json state = root.at("trainer_state");
  if (!state.is_object())
    bad(state, hp::detail::cat("expected an object, got ", state.type_name()));
  meta.trainer_state_json = state.dump();
  const io::Json tensors = root.at("tensors");
  if (!tensors.is_object())
    bad(tensors, hp::detail::cat("expected an object, got ", tensors.type_name()));
  for (const auto& [fqn, t] : tensors.items()) {
    check_keys(t, {"dtype", "shape", "pieces"});
    TensorMeta tm;
    tm.fqn = fqn;
    try {
      tm.dtype = dtype_from_name(t.get_string("dtype"));
    } catch (const ValueError&) {
      bad(t.at("dtype"), "unknown dtype '" + t.get_string("dtype") + "'");
    }
    tm.global_shape = int_list(t.at("shape"));
    const io::Json pieces = t.at("pieces");
    if (!pieces.is_array())
      bad(pieces, hp::detail::cat("expected an array, got ", pieces.type_name()));
    for (const io::Json& p : pieces.elements()) tm.pieces.push_back(read_piece(p));
    detail::validate_tensor(tm, root.file());
    meta.tensors.push_back(std::move(tm));
  }
  return meta;  // items() is in key order, so tensors are sorted by fqn
}

}  // namespace

Metadata read_metadata(const std::string& step_dir) {
  try {
    return parse_metadata(step_dir);
  } catch (const IoError& e) {
    // The JSON facade's type errors say "[json] <file>: <key>: ..."; report them as ours.
    const std::string_view what = e.what();
    if (what.rfind("[json] ", 0) != 0) throw;
    throw IoError("[ckpt] " + std::string(what.substr(7)));
  }
}

}  // namespace hp::checkpoint
