#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lnv {

std::string read_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) throw ModelError(path, "cannot read: is a directory");
  // A device never ends (/dev/zero); a FIFO (`<(cat model.json)`) does, and is read.
  if (fs::is_character_file(st) || fs::is_block_file(st) || fs::is_socket(st))
    throw ModelError(path, "cannot read: not a regular file (a device or socket)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(path, std::string("cannot open file: ") + std::strerror(errno));
  std::string text;
  std::vector<char> chunk(1 << 20);
  while (in.read(chunk.data(), std::streamsize(chunk.size())) || in.gcount() > 0) {
    text.append(chunk.data(), size_t(in.gcount()));
    if (text.size() > kMaxTextBytes)
      throw ModelError(path, "cannot read: longer than " + std::to_string(kMaxTextBytes >> 30) +
                                 " GiB (weights belong in a safetensors file)");
  }
  if (in.bad()) throw ModelError(path, "error while reading the file");
  return text;
}

namespace {

using nlohmann::json;

// Where a parse is, kept up to date from the parser's events: one frame per open array or
// object, holding the index or key of the value being read in it.
class ParsePosition {
 public:
  void open(bool array) { frames_.push_back({array, 0, {}, {}}); }
  // Returns false for a key already seen in this object.
  bool key(const std::string& k) {
    frames_.back().key = k;
    return frames_.back().keys.insert(k).second;
  }
  // A value (scalar, or a container just closed) is complete.
  void value_done() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }
  void close() {
    frames_.pop_back();
    value_done();
  }
  // The JSON pointer of the value being read: its first `shown` steps, then "/...".
  std::string pointer(size_t shown) const {
    std::string out;
    for (size_t i = 0; i < frames_.size() && i < shown; ++i) {
      out += '/';
      if (frames_[i].array) {
        out += std::to_string(frames_[i].index);
        continue;
      }
      out += pointer_token(printable(frames_[i].key));
    }
    if (frames_.size() > shown) out += "/...";
    return out.empty() ? "/" : out;
  }

 private:
  struct Frame {
    bool array;
    size_t index;
    std::string key;
    std::set<std::string> keys;  // of an object, to find duplicates
  };
  std::vector<Frame> frames_;
};

}  // namespace

json parse_json(const std::string& text, const std::string& where, const std::string& what) {
  ParsePosition at;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        // `depth` counts the containers around the one being opened.
        if (depth >= kMaxJsonDepth)
          throw ModelError(where, what + ": arrays and objects nested deeper than " +
                                      std::to_string(kMaxJsonDepth) + " levels, at " +
                                      at.pointer(8));
        at.open(event == json::parse_event_t::array_start);
        break;
      case json::parse_event_t::key:
        if (!at.key(parsed.get<std::string>()))
          throw ModelError(where, what + ": the key '" + printable(parsed.get<std::string>()) +
                                      "' appears twice in an object (at " + at.pointer(8) + ")");
        break;
      case json::parse_event_t::value: at.value_done(); break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end: at.close(); break;
    }
    return true;
  };
  try {
    return json::parse(text, on_event);
  } catch (const json::exception& e) {
    throw ModelError(where, what + ": " + e.what());
  }
}

void check_json_depth(const json& j, const std::string& where, const std::string& what) {
  // (value, containers around it and itself); scalars are never pushed.
  std::vector<std::pair<const json*, int>> todo;
  if (j.is_structured()) todo.emplace_back(&j, 1);
  while (!todo.empty()) {
    const auto [v, depth] = todo.back();
    todo.pop_back();
    if (depth > kMaxJsonDepth)
      throw ModelError(where, what + ": arrays and objects nested deeper than " +
                                  std::to_string(kMaxJsonDepth) + " levels");
    for (const json& c : *v)
      if (c.is_structured()) todo.emplace_back(&c, depth + 1);
  }
}

namespace {

// Appends j as dump() writes it, but stops soon after `out` reaches `limit` characters:
// each level adds a character before descending, so the recursion is at most `limit` deep
// and a huge value costs no more than its first few elements.
void append_excerpt(std::string& out, const json& j, size_t limit) {
  if (out.size() > limit) return;
  if (j.is_array() || j.is_object()) {
    out += j.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end() && out.size() <= limit; ++it) {
      out += first ? "" : ",";
      first = false;
      if (j.is_object()) out += json(it.key()).dump() + ":";
      append_excerpt(out, *it, limit);
    }
    out += j.is_array() ? ']' : '}';
  } else if (j.is_number_float() && !std::isfinite(j.get<double>())) {  // dump() says null
    out += std::isnan(j.get<double>()) ? "NaN" : j.get<double>() > 0 ? "Infinity" : "-Infinity";
  } else if (j.is_string()) {
    // Only the start of a long string; a character cut in two becomes U+FFFD.
    const std::string& s = j.get_ref<const std::string&>();
    out += json(s.substr(0, limit)).dump(-1, ' ', false, json::error_handler_t::replace);
  } else {
    out += j.dump();
  }
}

}  // namespace

std::string excerpt(const json& j) {
  constexpr size_t kShown = 60;
  std::string s;
  append_excerpt(s, j, kShown);
  if (s.size() <= kShown) return s;
  size_t cut = kShown - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
  return s.substr(0, cut) + "...";
}

std::string pointer_token(std::string_view key) {
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[u >> 4];
      out += hex[u & 0xf];
    }
  }
  return out;
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFileWriter out(path);
  out.write(bytes);
  out.commit(true);
}

void check_path_length(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string name = target.filename().string();
  const long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);  // -1: dir missing or no limit
  const size_t limit = name_max > 0 ? size_t(name_max) : size_t(NAME_MAX);
  if (name.size() > limit)
    throw ModelError(path, "cannot write: the file name is " + std::to_string(name.size()) +
                               " bytes long, more than the " + std::to_string(limit) +
                               " the file system allows");
  if (path.size() >= PATH_MAX)
    throw ModelError(path, "cannot write: the path is " + std::to_string(path.size()) +
                               " bytes long, more than the " + std::to_string(PATH_MAX - 1) +
                               " the system allows");
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  namespace fs = std::filesystem;
  const fs::path target(path_);
  // The new file is renamed over the target: that would replace a device or a FIFO by a
  // regular file (as root, /dev/null itself).
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_regular_file(st) && !fs::is_directory(st))
    throw ModelError(path_, "cannot write: not a regular file (a device, FIFO or socket); "
                            "lnverify writes its outputs as regular files");
  check_path_length(path_);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string name = ".";
  name += target.filename().string();
  // The temporary name is longer than the target's; a target name near the limit gets a
  // temporary name cut to fit.
  constexpr std::string_view kSuffix = ".tmp-XXXXXX";
  const long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max > 0 && name.size() + kSuffix.size() > size_t(name_max))
    name.resize(size_t(name_max) - kSuffix.size());
  name += kSuffix;
  tmp_ = (dir / name).string();
  fd_ = ::mkstemp(tmp_.data());
  if (fd_ < 0) {
    const int err = errno;
    tmp_.clear();
    throw ModelError(path_, std::string("cannot create a temporary file in ") + dir.string() +
                                ": " + std::strerror(err));
  }
  // mkstemp creates 0600; give the file the permissions a plain create would.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd_, 0666 & ~mask) != 0) fail("cannot set permissions", errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::fail(const std::string& what, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  throw ModelError(path_, what + ": " + std::strerror(err));
}

void AtomicFileWriter::write(std::string_view bytes) {
  if (fd_ < 0) throw ModelError(path_, "cannot write: the file is already closed");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    done += static_cast<size_t>(n);
  }
}

void AtomicFileWriter::append_from(const std::string& from, int64_t offset, uint64_t length) {
  if (fd_ < 0) throw ModelError(path_, "cannot write: the file is already closed");
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) throw ModelError(from, std::string("cannot open the file: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{in};
  off_t at = static_cast<off_t>(offset);
  uint64_t left = length;
  bool kernel = true;
  std::string buf;
  while (left > 0) {
    ssize_t n = -1;
    if (kernel) {
      n = ::copy_file_range(in, &at, fd_, nullptr, left, 0);
      if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
        kernel = false;  // not between these files: through a buffer
        continue;
      }
    } else {
      if (buf.empty()) buf.resize(size_t{1} << 22);
      n = ::pread(in, buf.data(), std::min<uint64_t>(left, buf.size()), at);
      if (n > 0) {
        write(std::string_view(buf.data(), size_t(n)));
        at += n;
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ModelError(from, std::string("cannot copy from the file: ") + std::strerror(errno));
    if (n == 0) throw ModelError(from, "ends before the " + std::to_string(length) + " bytes at offset " +
                                           std::to_string(offset) + " (the file changed?)");
    left -= uint64_t(n);
  }
}

void AtomicFileWriter::close_file(bool sync) {
  if (fd_ < 0) throw ModelError(path_, "cannot commit: the file is already closed");
  if (sync && ::fsync(fd_) != 0) fail("cannot flush to disk", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", errno);
}

void AtomicFileWriter::commit(bool sync) {
  commit_together({this}, sync);
}

void commit_together(const std::vector<AtomicFileWriter*>& files, bool sync) {
  for (AtomicFileWriter* f : files) f->close_file(sync);
  // What each rename replaced, to put it back if a later rename fails.
  struct Replaced {
    bool existed = false;
    std::string kept;  // a hard link to the old file ("" when none could be made)
  };
  std::vector<Replaced> replaced;
  auto undo = [&] {
    for (size_t i = replaced.size(); i-- > 0;) {
      const std::string& target = files[i]->path_;
      if (!replaced[i].existed) ::unlink(target.c_str());
      else if (!replaced[i].kept.empty()) ::rename(replaced[i].kept.c_str(), target.c_str());
    }
  };
  for (AtomicFileWriter* f : files) {
    Replaced r{true, f->tmp_ + ".old"};  // tmp_ is unique, so this name is free
    if (::link(f->path_.c_str(), r.kept.c_str()) != 0) {
      r.existed = errno != ENOENT;
      r.kept.clear();
    }
    if (::rename(f->tmp_.c_str(), f->path_.c_str()) != 0) {
      const int err = errno;
      if (!r.kept.empty()) ::unlink(r.kept.c_str());
      undo();
      f->fail("cannot rename the temporary file into place", err);
    }
    f->tmp_.clear();
    replaced.push_back(std::move(r));
  }
  for (const Replaced& r : replaced)
    if (!r.kept.empty()) ::unlink(r.kept.c_str());
}

}  // namespace lnv
