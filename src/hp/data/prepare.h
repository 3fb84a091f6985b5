// `hp data prepare`: tokenize corpora once into an indexed dataset (PREFIX.bin + PREFIX.idx,
// data/indexed.h) that training maps (data.format: indexed) instead of tokenizing at start-up.
//
// Inputs are files or directories (every regular file below one, sorted by path, as TokenDataset
// lists them), plain or `.gz` / `.zst` (data/input.h). A document is what TokenDataset makes of
// the same text (data/documents.h: a piece between doc_separator occurrences, or a whole file),
// or, for JSONL, the string member `field` of each line's object; empty documents are dropped.
// For chat, each line's conversation (`field`, default "messages") rendered by the chat template and
// encoded as TokenDataset's chat format does, with its loss mask written to PREFIX.mask.bin.
// Each document is encoded by the trainer's DocumentEncoder and followed by the separator id, and
// becomes one sequence (one document) of the dataset, so the dataset's token stream is exactly the
// stream TokenDataset builds from the same text with the same tokenizer and separator.
//
// Pipeline: one reader thread cuts the decompressed inputs into batches of whole documents
// (~batch_bytes each; never across files), `workers` threads encode batches, and the calling
// thread writes them in input order. At most 2 · workers + 2 batches are in flight, so memory is
// bounded by the batch size (plus one document), not the corpus; the output does not depend on
// the worker count or the batch size.
//
// Crash safety and resume: the dataset is written under *.partial names and published by renaming
// PREFIX.idx last (IndexedDatasetWriter), so an interrupted run never leaves a PREFIX.idx. Every
// ~checkpoint_bytes of input the partial files are synced and PREFIX.prepare.json records the input
// position reached and the output position written; a later run with the same inputs (paths,
// sizes, modification times) and options continues from there, re-reading (not re-encoding) the
// finished part of the current file. Any other error removes the partial files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hp/data/indexed.h"

namespace hp::data {

struct PrepareProgress {
  int64_t files_done = 0, files = 0;
  uint64_t file_bytes_done = 0, file_bytes = 0;  // input files as stored (compressed or not)
  uint64_t bytes = 0;                            // decompressed input bytes read
  int64_t documents = 0, tokens = 0;
  double seconds = 0;
};

struct PrepareOptions {
  std::vector<std::string> inputs;  // files or directories
  std::string out;                  // PREFIX of PREFIX.bin + PREFIX.idx
  std::string format = "text";      // text | jsonl | chat
  // jsonl: the member holding each document's text ("" = "text"); chat: the messages ("" =
  // "messages").
  std::string field;
  // chat: tokenizer_config.json holding chat_template, or a .jinja file ("" = the
  // tokenizer_config.json beside `tokenizer`).
  std::string chat_template;
  std::string tokenizer;            // tokenizer.json; "" = byte-level
  std::string separator_token;      // "" = the tokenizer's end-of-text (DocumentEncoder)
  std::string doc_separator;        // text: splits files into documents ("" = one per file)
  // jsonl, chat: a line that is not a JSON object holding the string `field` (chat: a valid
  // conversation) is counted and skipped instead of failing the run.
  bool skip_bad_lines = false;
  int workers = 0;         // encoding threads; 0 = num_threads() (HP_NUM_THREADS or all cores)
  bool overwrite = false;  // replace an existing dataset at PREFIX
  size_t batch_bytes = size_t{1} << 18;  // input bytes per batch (a whole document at least)
  uint64_t checkpoint_bytes = uint64_t{256} << 20;  // input bytes between resume points
  double progress_interval_s = 1.0;
  std::function<void(const PrepareProgress&)> on_progress;  // also called once at the end
  // Tests: after this many resume points, stop one batch later as a crash would (that batch
  // written to the partial files, which stay with PREFIX.prepare.json) by throwing IoError
  // "[data] prepare: stopped ..."; 0 = never.
  int64_t stop_after_checkpoints = 0;
};

struct PrepareResult {
  int64_t files = 0, documents = 0, tokens = 0;
  int64_t empty_documents = 0;  // jsonl: lines whose field is ""
  int64_t skipped_lines = 0;    // jsonl with skip_bad_lines
  std::string first_skipped;    // "FILE:LINE: why" of the first skipped line
  uint64_t bytes = 0;           // decompressed input bytes
  IndexedDType dtype = IndexedDType::u16;
  int workers = 0;
  double seconds = 0;
  // Continued from PREFIX.prepare.json: the input bytes and documents it had already done.
  bool resumed = false;
  uint64_t resumed_bytes = 0;
  int64_t resumed_documents = 0;
};

// Writes PREFIX.bin + PREFIX.idx. Errors ("[data] ..."): no inputs, an unknown format, a text-only
// option with jsonl or the reverse, an existing dataset at PREFIX without `overwrite` (ValueError);
// the input and tokenizer errors of TokenDataset; a JSONL line that is not JSON, not an object, or
// lacks the string `field` (ValueError naming FILE:LINE, unless skip_bad_lines); a chat line
// whose conversation is invalid (parse_conversation's errors, FILE:LINE, unless skip_bad_lines)
// or that the template refuses; corrupt or truncated compressed input (IoError naming the file).
PrepareResult prepare_dataset(const PrepareOptions& o);

// PREFIX.prepare.json: the resume record of an unfinished prepare.
std::string prepare_journal_path(const std::string& prefix);

}  // namespace hp::data
