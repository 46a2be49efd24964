// Writing: the model with the removed nodes dropped and the new ones placed, streamed data
// spliced in, the side file, and the external data files copied beside the output, all
// committed together.
// A part of the FoldWriter of onnx/fold_writer_internal.h.
#include "onnx/fold_writer_internal.h"

namespace lnv::onnx_import::fold_write {

void FoldWriter::write() {
  auto* g = mp_.mutable_graph();
  google::protobuf::RepeatedPtrField<ox::NodeProto> nodes;
  for (int i = 0; i < g->node_size(); ++i) {
    if (auto it = inserted_.find(i); it != inserted_.end())
      for (auto& n : it->second) *nodes.Add() = n;
    if (!removed_.count(i)) *nodes.Add() = g->node(i);
  }
  if (auto it = inserted_.find(g->node_size()); it != inserted_.end())
    for (auto& n : it->second) *nodes.Add() = n;  // after the last node (training)
  g->mutable_node()->Swap(&nodes);
  drop_norm_constants();
  for (auto& t : new_initializers_) *g->add_initializer() = std::move(t);

  std::vector<std::unique_ptr<AtomicFileWriter>> files;
  // External data the output keeps referencing: beside the input it is read in place;
  // elsewhere each file is copied beside the output under the same name.
  if (!out_beside_input()) {
    const fs::path od = out_.parent_path().empty() ? fs::path(".") : out_.parent_path();
    Copied copied;
    for (const fs::path& f : input_data_files()) copied.total += file_size_of(f);
    for (const fs::path& f : input_data_files()) {
      const fs::path to = od / f.lexically_relative(model_dir_);
      if (same_path(to, out_) || same_path(to, side_path()))
        throw ModelError(to.string(), "the copy of the input's external data would overwrite "
                                      "the output; choose another -o path");
      fs::create_directories(to.parent_path());
      files.push_back(std::make_unique<AtomicFileWriter>(to.string()));
      copy_into(f, *files.back(), copied);
      summary_.copied_files.push_back(to.string());
    }
  }
  if (side_) {
    files.push_back(std::move(side_));
    summary_.side_file = side_path().string();
  }
  files.push_back(std::make_unique<AtomicFileWriter>(out_.string()));
  write_model(*files.back());
  std::vector<AtomicFileWriter*> all;
  for (auto& f : files) all.push_back(f.get());
  for (AtomicFileWriter* w : options_.commit_with) all.push_back(w);
  report_progress(options_.progress, "commit files", "", 0, 0);
  commit_together(all, options_.sync);
}

// The model into `to`: the ModelProto without the data of the streamed initializers
// (the in_file_ ones the fold left as they were join streamed_ as copies), and that data
// written in its place as it is read (splice_raw_data: the same bytes SerializeToString
// gives for the model holding it).
void FoldWriter::write_model(AtomicFileWriter& to) {
  for (auto& t : *mp_.mutable_graph()->mutable_initializer()) {
    if (!in_file(t)) continue;
    const StoredData& at = in_file_.at(t.name());
    streamed_[t.name()] = {uint64_t(at.length), {}, at.offset};
    t.clear_external_data();
    t.clear_data_location();
  }
  std::string model;
  if (!mp_.SerializeToString(&model))
    throw ModelError(out_.string(), "the folded model cannot be serialized (over 2 GiB?)");
  std::map<std::string, uint64_t> sizes;
  for (const auto& [name, s] : streamed_) sizes[name] = s.size;
  const SplicedMessage spliced = splice_raw_data(model, sizes);
  if (spliced.size >= (uint64_t{2} << 30))
    throw ModelError(out_.string(), "the folded model would be 2 GiB or more, over protobuf's "
                                    "limit for one message");
  // In chunks, so that a large single-file model shows its progress.
  constexpr size_t kChunk = size_t(1) << 24;
  uint64_t done = 0;
  auto sink = [&](const char* b, size_t n) {
    for (size_t at = 0; at < n; at += kChunk) {
      report_progress(options_.progress, "write model", "bytes", done, spliced.size);
      const size_t len = std::min(kChunk, n - at);
      to.write(std::string_view(b + at, len));
      done += len;
    }
  };
  for (const SplicedPiece& p : spliced.pieces) {
    if (p.tensor.empty()) {
      sink(p.bytes.data(), p.bytes.size());
      continue;
    }
    const uint64_t before = done;
    const Streamed& s = streamed_.at(p.tensor);
    if (s.emit) {
      s.emit(sink);
    } else {
      to.append_from(source_.string(), s.offset, s.size);
      done += s.size;
    }
    if (done - before != p.size)
      throw InternalError("write_folded_onnx: " + p.tensor + ": wrong byte count");
  }
  report_progress(options_.progress, "write model", "bytes", done, spliced.size);
}

// Initializers that only the replaced norms' nodes read (their eps, exponent, axes)
// would be left unused: they go with the nodes.
void FoldWriter::drop_norm_constants() {
  std::set<std::string> read_by_new;
  for (const auto& [at, nodes] : inserted_)
    for (const auto& n : nodes) read_by_new.insert(n.input().begin(), n.input().end());
  auto* inits = mp_.mutable_graph()->mutable_initializer();
  google::protobuf::RepeatedPtrField<ox::TensorProto> kept;
  for (auto& t : *inits) {
    bool dead = !is_graph_output(t.name()) && readers_.count(t.name()) &&
                !read_by_new.count(t.name());
    if (dead)
      for (const Slot& s : readers_.at(t.name())) dead = dead && removed_.count(s.node);
    for (const auto& v : mp_.graph().input()) dead = dead && v.name() != t.name();
    if (!dead) *kept.Add() = std::move(t);
    else ++summary_.dropped;
  }
  inits->Swap(&kept);
}

uint64_t FoldWriter::file_size_of(const fs::path& f) {
  std::error_code ec;
  const auto size = fs::file_size(f, ec);
  return ec ? 0 : uint64_t(size);
}

void FoldWriter::copy_into(const fs::path& from, AtomicFileWriter& to, Copied& copied) const {
  std::ifstream in(from, std::ios::binary);
  if (!in) throw ModelError(from.string(), "cannot open the external data file");
  std::string buf(size_t(1) << 22, '\0');
  while (in) {
    report_progress(options_.progress, "copy external data", "bytes", copied.done,
                    std::max(copied.total, copied.done));
    in.read(buf.data(), std::streamsize(buf.size()));
    const auto got = in.gcount();
    if (got > 0) to.write(std::string_view(buf.data(), size_t(got)));
    copied.done += uint64_t(std::max<std::streamsize>(got, 0));
  }
  report_progress(options_.progress, "copy external data", "bytes", copied.done,
                  std::max(copied.total, copied.done));
}

}  // namespace lnv::onnx_import::fold_write
