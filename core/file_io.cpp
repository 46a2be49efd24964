#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace lnv {

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ModelError(path, "cannot read: is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(path, std::string("cannot open file: ") + std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw ModelError(path, "error while reading the file");
  return buf.str();
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFileWriter out(path);
  out.write(bytes);
  out.commit(true);
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  namespace fs = std::filesystem;
  const fs::path target(path_);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string name = ".";
  name += target.filename().string();
  name += ".tmp-XXXXXX";
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

void AtomicFileWriter::commit(bool sync) {
  if (fd_ < 0) throw ModelError(path_, "cannot commit: the file is already closed");
  if (sync && ::fsync(fd_) != 0) fail("cannot flush to disk", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot rename the temporary file into place", errno);
  tmp_.clear();
}

}  // namespace lnv
