// src/io/file_util.cc — POSIX implementation of the checked file wrapper (see file_util.h).
#include "io/file_util.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tfm/io/safetensors.h"

namespace tfm::io {
namespace {

// "path: what failed: errno text" — errno captured by the caller right after the failed call.
[[noreturn]] void throw_errno(const std::string& path, const char* what, int err) {
  throw IoError(path + ": " + what + " failed: " + std::strerror(err));
}

// Opens a regular file read-only and returns (fd, size). Refuses directories, FIFOs and devices:
// their size is meaningless and mmap/read on them would block or fail obscurely. O_NONBLOCK: opening a FIFO
// would otherwise wait for a writer before the check could refuse it (a regular file's reads ignore the flag).
int open_regular_readonly(const std::string& path, size_t* size) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  while (fd < 0 && errno == EAGAIN)  // a lease held by another process (Samba, NFS): wait for it, as a plain open does
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno(path, "open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw_errno(path, "fstat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(path + ": not a regular file" +
                  (S_ISDIR(st.st_mode) ? std::string(": ") + std::strerror(EISDIR) : ""));
  }
  *size = static_cast<size_t>(st.st_size);
  return fd;
}

// Splits "a/b/c.bin" into ("a/b", "c.bin"); "c.bin" into (".", "c.bin"); "/c.bin" into ("/", ..).
void split_path(const std::string& path, std::string* dir, std::string* base) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) {
    dir->assign(1, '.');  // (assign, not `= "."`: GCC 12 warns falsely, -Wrestrict, where this is inlined)
    base->assign(path);
  } else {
    // assign(), not `x = cond ? a : b.substr()`: GCC 12 warns falsely (-Wrestrict) on the latter.
    dir->assign(path, 0, slash == 0 ? 1 : slash);
    base->assign(path, slash + 1, std::string::npos);
  }
}

// `path` with its symlinks followed (relative links against their own directory), for a writer that replaces the
// file a link names: a dangling link gives the path its target would have. Throws IoError (ELOOP) after 40 links.
std::string follow_links(const std::string& path) {
  std::string target = path;
  for (int hops = 0; hops <= 40; ++hops) {
    struct stat lst {};
    if (::lstat(target.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return target;
    std::string link(static_cast<size_t>(lst.st_size > 0 ? lst.st_size : 4096) + 1, '\0');
    const ssize_t n = ::readlink(target.c_str(), link.data(), link.size());
    if (n < 0) throw_errno(target, "readlink", errno);
    link.resize(static_cast<size_t>(n));
    std::string link_dir, link_base;
    split_path(target, &link_dir, &link_base);
    target = link.front() == '/' ? link : link_dir + "/" + link;
  }
  throw_errno(path, "follow the symlinks", ELOOP);
}

// The descriptor a name for one of this process's open descriptors stands for (/dev/stdout, /dev/stderr,
// /dev/fd/N, /proc/self/fd/N), or −1: such a name is written through that descriptor (dup'ed), where the shell
// put it — a file opened for appending keeps its earlier bytes, a socket cannot be opened by name at all.
int descriptor_named(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const size_t n = std::strlen(prefix);
    if (path.size() > n && path.size() <= n + 9 && path.compare(0, n, prefix) == 0 &&
        std::all_of(path.begin() + static_cast<std::ptrdiff_t>(n), path.end(),
                    [](char c) { return c >= '0' && c <= '9'; }))
      return std::stoi(path.substr(n));
  }
  return -1;
}

}  // namespace

// (file_util.h) ".<base>.tmp.", with base cut to leave room for the
// unique suffix (pid, counter, clock: up to 42 bytes) within a file name's 255 bytes (NAME_MAX), so that a name
// near that limit can still be written.
std::string temp_prefix(const std::string& base) {
  constexpr size_t kRoom = 255 - 1 - 5 - 42;  // NAME_MAX, less ".", ".tmp." and the suffix
  std::string out(1, '.');                    // (appended, not "." + string: GCC 12's -Wrestrict misreads that)
  out.append(base, 0, std::min(base.size(), kRoom));
  out += ".tmp.";
  return out;
}

std::string read_file(const std::string& path) {
  size_t size = 0;
  const int fd = open_regular_readonly(path, &size);
  std::string out(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out.data() + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw_errno(path, "read", err);
    }
    if (n == 0) {  // the file shrank between fstat and read
      ::close(fd);
      throw IoError(path + ": read failed: file shrank to " + std::to_string(done) +
                    " bytes while reading (expected " + std::to_string(size) + ")");
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

MappedFile::MappedFile(const std::string& path, Access access) : path_(path), access_(access) {
  const int fd = open_regular_readonly(path, &size_);
  if (size_ == 0) {  // mmap(len = 0) is EINVAL; an empty file has nothing to map
    ::close(fd);
    return;
  }
  // PROT_WRITE with MAP_PRIVATE needs only a read-only descriptor: writes go to private copies.
  const int prot = access == Access::CopyOnWrite ? PROT_READ | PROT_WRITE : PROT_READ;
  void* p = ::mmap(nullptr, size_, prot, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (p == MAP_FAILED) throw_errno(path, "mmap", err);
  data_ = static_cast<uint8_t*>(p);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

uint8_t* MappedFile::mutable_data() const {
  if (access_ != Access::CopyOnWrite)
    throw IoError(path_ + ": mutable_data() on a read-only mapping (map it CopyOnWrite)");
  return data_;
}

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path) {
  if (path.empty()) throw IoError("cannot write to an empty path (no file name given)");
  // A device, FIFO or socket (/dev/null, /dev/stdout, a pipe) is written in place, as a shell's redirection
  // writes it: renaming a file over it would replace the node itself (as root, /dev/null for every process).
  // A name for an open descriptor (/dev/stdout) is written through it, wherever it points (a file opened for
  // appending, a socket).
  if (const int named = descriptor_named(path); named >= 0) {
    fd_ = ::fcntl(named, F_DUPFD_CLOEXEC, 0);
    if (fd_ < 0) throw_errno(path, "dup", errno);
    in_place_ = true;
    return;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    do {  // (a FIFO waits here for its reader, as a shell's redirection does)
      fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) throw_errno(path, "open", errno);
    in_place_ = true;
    return;
  }
  // A symlink is followed: the file it names is replaced, not the link (a dangling link's target is created).
  target_ = follow_links(path);
  std::string dir, base;
  split_path(target_, &dir, &base);
  if (base.empty()) throw IoError(path + ": cannot write: path names a directory");
  // Unique name in the destination directory: pid + process-wide counter + clock, created with
  // O_EXCL so two writers (threads or processes) never share a temporary file.
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0;; ++attempt) {
    const uint64_t stamp = static_cast<uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    temp_path_ = (dir == "/" ? std::string("/") : dir + "/") + temp_prefix(base) + std::to_string(::getpid()) + "." +
                 std::to_string(counter++) + "." + std::to_string(stamp % 1000000007u);
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    const int err = errno;
    if ((err == EEXIST || err == EINTR) && attempt < 100) continue;
    throw IoError(path + ": cannot create temporary file '" + temp_path_ +
                  "': " + std::strerror(err));
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  if (!in_place_) ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::write(const void* bytes, size_t n) {
  if (committed_ || fd_ < 0) throw IoError(path_ + ": write after sync or commit");
  const char* p = static_cast<const char*>(bytes);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno(path_, "write", errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::sync() {
  if (committed_ || synced_ || fd_ < 0) throw IoError(path_ + ": sync after sync or commit");
  // (a device, FIFO or socket written in place may not sync: EINVAL, ENOTSUP, ENOTTY)
  if (::fsync(fd_) != 0 && !(in_place_ && (errno == EINVAL || errno == ENOTSUP || errno == ENOTTY)))
    throw_errno(path_, "fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  synced_ = true;
  // close can report a deferred write error (NFS); the destructor still unlinks the temp file.
  if (::close(fd) != 0) throw_errno(path_, "close", errno);
}

void AtomicFileWriter::commit() {
  if (committed_) throw IoError(path_ + ": commit called twice");
  if (!synced_) sync();
  if (in_place_) {  // written where it is: nothing to rename
    committed_ = true;
    return;
  }
  if (::rename(temp_path_.c_str(), target_.c_str()) != 0) throw_errno(path_, "rename", errno);
  committed_ = true;
  // Make the rename itself durable. Some file systems cannot fsync a directory (EINVAL): the data
  // is still whole, only the directory entry's durability is up to the file system then.
  std::string dir, base;
  split_path(target_, &dir, &base);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throw_errno(dir, "open directory", errno);
  if (::fsync(dfd) != 0 && errno != EINVAL) {
    const int err = errno;
    ::close(dfd);
    throw_errno(dir, "fsync directory", err);
  }
  ::close(dfd);
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFileWriter w(path);
  w.write(bytes.data(), bytes.size());
  w.commit();
}

void refuse_output_holding(const std::string& dest, const std::string& source) {
  namespace fs = std::filesystem;
  if (dest.empty() || source.empty()) return;
  // Symlinks and ".." resolved as far as the path exists; where that fails, the lexical absolute path.
  const auto resolved = [](const std::string& p) {
    std::error_code ec;
    fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
    if (ec || r.empty()) r = fs::absolute(p, ec).lexically_normal();
    if (r.filename().empty()) r = r.parent_path();  // "out/" names "out"
    return r;
  };
  const fs::path d = resolved(dest), s = resolved(source);
  if (d.empty() || s.empty()) return;
  const auto inside = [&](const fs::path& p) {
    return std::mismatch(d.begin(), d.end(), p.begin(), p.end()).first == d.end();
  };
  if (inside(s))
    throw IoError(dest + ": the output directory " + (d == s ? "is " : "holds ") + source +
                  ", which it is made from (choose another output directory)");
  // A source directory's files may be symlinks into the output (a model.safetensors linked to another copy).
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(s, ec)) {
    if (!entry.is_symlink(ec)) continue;
    const fs::path target = fs::weakly_canonical(entry.path(), ec);
    if (!ec && inside(target))
      throw IoError(dest + ": the output directory holds " + target.string() + ", which " + entry.path().string() +
                    " links to (choose another output directory)");
  }
}

std::string filesystem_error_text(const std::filesystem::filesystem_error& e) {
  // what() is "filesystem error: <what>: <errno text> [path1] [path2]" (libstdc++, libc++ alike): <what> is cut out.
  std::string what = e.what();
  const std::string head = "filesystem error: ", tail = ": " + e.code().message();
  if (what.rfind(head, 0) == 0) what.erase(0, head.size());
  const size_t at = what.find(tail);
  what = at == std::string::npos ? std::string("file operation failed") : what.substr(0, at);
  const std::string p1 = e.path1().string(), p2 = e.path2().string();
  if (p1.empty()) return what + ": " + e.code().message();
  if (p2.empty()) return p1 + ": " + what + ": " + e.code().message();
  return p2 + ": " + what + " from " + p1 + ": " + e.code().message();  // (copy, rename: the second is written)
}

StagedDirectory::StagedDirectory(const std::string& dest, bool replace, const std::vector<std::string>& sources,
                                 std::unique_ptr<DirectoryLock> dest_lock)
    : dest_(dest), given_(dest), dest_lock_(std::move(dest_lock)), replace_(replace) {
  namespace fs = std::filesystem;
  std::error_code ec;
  while (given_.size() > 1 && given_.back() == '/') given_.pop_back();  // "out/" is said "out"
  for (const std::string& s : sources) refuse_output_holding(dest, s);
  // One spelling of the path for every step — the lock, the staging sibling, the renames — so that all of them
  // name the directory the kernel resolves ("link/../out" is out beside the link's target, not ./out).
  const fs::path d(given_);
  if (d.empty() || d.filename() == "." || d.filename() == "..") throw IoError(dest + ": not a directory name");
  dest_ = given_;
  if (fs::exists(d, ec) && !replace)
    throw IoError(dest + ": exists (choose another output directory, or replace it with --force)");
  if (fs::exists(d, ec) && !fs::is_directory(d, ec)) throw IoError(dest + ": exists and is not a directory");
  // Replacing it: held from now until the new one is in place (a training run in it, or another replacing writer,
  // refuses this one).
  if (replace && !dest_lock_) dest_lock_ = lock_for_replacing(given_);
  const fs::path parent = d.parent_path().empty() ? fs::path(".") : d.parent_path();
  fs::create_directories(parent, ec);
  if (ec) throw IoError(parent.string() + ": create_directories failed: " + ec.message());
  // A name of its own, never reused (pid, a process-wide counter and the clock: unique on this machine and,
  // almost surely, beside another machine's writers on a shared file system), made with create_directory, which
  // fails for an existing name: no other writer's directory is ever taken or deleted. Made, then locked: a
  // remove_abandoned_staging that takes the lock of the fresh directory first deletes it, and this writer moves
  // on to another name (the lock taken, it checks that the directory it holds is still the one named).
  static std::atomic<uint64_t> counter{0};
  const std::string prefix = temp_prefix(d.filename().string()) + std::to_string(::getpid()) + ".";
  for (int attempt = 0;; ++attempt) {
    if (attempt == 100)
      throw IoError(dest + ": cannot write it (no staging directory " + temp_ +
                    " could be made and kept: another process deleted every one)");
    const uint64_t stamp = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    temp_ = (parent / (prefix + std::to_string(counter++) + "." + std::to_string(stamp % 1000000007u))).string();
    if (!fs::create_directory(temp_, ec)) {
      if (ec)  // said of the output asked for (the staging name is ours)
        throw IoError(dest + ": cannot write it (its staging directory " + temp_ + ": " + ec.message() + ")");
      continue;  // the name exists: another
    }
    const int fd = ::open(temp_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // deleted already
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err != EWOULDBLOCK) return;  // no flock on this file system: written unlocked (and never removed)
      ::rmdir(temp_.c_str());          // a remover holds it: its to delete (rmdir takes an empty directory only)
      continue;
    }
    struct stat held {
    }, named{};  // is it still the directory named temp_ (not deleted by a remover)?
    if (::fstat(fd, &held) == 0 && ::lstat(temp_.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino) {
      lock_fd_ = fd;
      return;
    }
    ::close(fd);
  }
}

StagedDirectory::~StagedDirectory() {
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove_all(temp_, ec);
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string StagedDirectory::said_of_dest(std::string message) const {
  if (temp_.empty()) return message;
  for (size_t at = message.find(temp_); at != std::string::npos; at = message.find(temp_, at + given_.size()))
    message.replace(at, temp_.size(), given_);
  return message;
}

void StagedDirectory::write(const std::function<void(const std::string& dir)>& write) {
  try {
    write(temp_);
  } catch (const std::filesystem::filesystem_error& e) {  // (before runtime_error, which it is)
    throw IoError(said_of_dest(filesystem_error_text(e)));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(said_of_dest(e.what()));
  } catch (const SafeTensorsError& e) {
    throw SafeTensorsError(said_of_dest(e.what()));
  } catch (const std::runtime_error& e) {
    throw IoError(said_of_dest(e.what()));
  }
}

void StagedDirectory::commit() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string old;
  if (fs::exists(dest_, ec)) {
    if (!replace_) throw IoError(dest_ + ": exists (choose another output directory, or replace it with --force)");
    // Made, or replaced by another (moved aside and made again), since the lock was taken: the one named now is
    // locked, refused if held (a run that started there meanwhile holds it).
    if (!dest_lock_ || !dest_lock_->names(dest_)) {
      dest_lock_.reset();
      dest_lock_ = lock_for_replacing(dest_);
    }
    // One atomic swap where the file system has it: a kill at any point leaves the old or the new directory
    // at dest, never neither; the old one, now at the staging name, is deleted after.
    if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, dest_.c_str(), RENAME_EXCHANGE) == 0) {
      committed_ = true;
      fs::remove_all(temp_, ec);
      release_locks();
      return;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) throw_errno(dest_, "rename (exchange)", errno);
    old = temp_ + ".old";  // without the swap: two renames, the old one moved aside first
    fs::remove_all(old, ec);
    if (::rename(dest_.c_str(), old.c_str()) != 0) throw_errno(dest_, "rename", errno);
  }
  if (::rename(temp_.c_str(), dest_.c_str()) != 0) {
    const int err = errno;
    if (!old.empty()) (void)::rename(old.c_str(), dest_.c_str());  // put the old one back
    throw_errno(dest_, "rename", err);
  }
  committed_ = true;
  if (!old.empty()) fs::remove_all(old, ec);
  release_locks();
}

void StagedDirectory::release_locks() {
  // The new directory in place, neither is needed: the staging lock (its flock, now on the new dest) and the old
  // dest's. Held on, they would refuse a run or another writer there for as long as this object lives.
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  dest_lock_.reset();
}

void require_writable_directory(const std::string& dir) {
  const std::string probe = (std::filesystem::path(dir) / (".tfm-write-probe." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int e = errno;
    throw IoError(dir + ": cannot write files there (" + std::strerror(e) + ")");
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

namespace {

enum class Lock { TAKEN, HELD, GONE, NO_FLOCK };

// Whether the descriptor `fd` is the directory `dir` names now (symlinks followed, as open follows them).
bool is_named(int fd, const std::string& dir) {
  struct stat held {
  }, named{};
  return ::fstat(fd, &held) == 0 && ::stat(dir.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
         held.st_ino == named.st_ino;
}

// One attempt at the exclusive flock of the directory `dir`: TAKEN (*fd holds it, and it is the directory named
// `dir` now), HELD (another holds it), GONE (no directory is named `dir`, or the one locked is no longer it: removed
// or replaced between the open and the flock), NO_FLOCK (the file system has none for directories). Throws IoError
// when `dir` cannot be opened for another reason.
Lock take_lock(const std::string& dir, int* fd) {
  *fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (*fd < 0) {
    const int e = errno;
    if (e == ENOENT) return Lock::GONE;
    throw IoError(dir + ": cannot open the directory (" + std::strerror(e) + ")");
  }
  if (::flock(*fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(*fd);
    *fd = -1;
    return e == EWOULDBLOCK ? Lock::HELD : Lock::NO_FLOCK;
  }
  if (is_named(*fd, dir)) return Lock::TAKEN;
  ::close(*fd);
  *fd = -1;
  return Lock::GONE;
}

constexpr int kLockAttempts = 100;  // a directory removed or replaced this many times while being locked: give up

const char* const kReplacingHeld =
    "a tfm train is running in this directory, or a tfm quantize, import or export is replacing it (it holds the "
    "directory's lock): wait for it to end, or write into another --out";

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& what) {
  for (int attempt = 0;; ++attempt) {
    switch (take_lock(dir, &fd_)) {
      case Lock::TAKEN:
      case Lock::NO_FLOCK:
        return;
      case Lock::HELD:
        throw IoError(dir + ": " + what);
      case Lock::GONE:
        if (std::error_code ec; attempt == kLockAttempts || !std::filesystem::exists(dir, ec))
          throw IoError(dir + ": cannot open the directory (" + std::strerror(ENOENT) + ")");
        break;  // replaced meanwhile: the one named now
    }
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

bool DirectoryLock::names(const std::string& dir) const { return fd_ < 0 || is_named(fd_, dir); }

std::unique_ptr<DirectoryLock> lock_for_replacing(const std::string& dest) {
  std::unique_ptr<DirectoryLock> lock(new DirectoryLock());
  for (int attempt = 0; attempt <= kLockAttempts; ++attempt) {
    struct stat st {};
    if (::stat(dest.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return nullptr;  // nothing to replace
    switch (take_lock(dest, &lock->fd_)) {
      case Lock::TAKEN:
      case Lock::NO_FLOCK:
        return lock;
      case Lock::HELD:
        throw IoError(dest + ": " + kReplacingHeld);
      case Lock::GONE:
        break;  // removed or replaced meanwhile: looked at again
    }
  }
  throw IoError(dest + ": cannot lock the directory (it was replaced " + std::to_string(kLockAttempts) +
                " times while being locked)");
}

namespace {
// Refuses, before anything is made, an output directory `dir` that cannot be made or used as one: the deepest of
// `dir` and its parents that exists (or is a symbolic link) must be a directory (OutputDirectory's messages).
void refuse_unusable_output(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "out/" names "out"
  for (fs::path q = p; !q.empty(); q = q.parent_path()) {
    struct stat l {
    }, st{};
    if (::lstat(q.c_str(), &l) == 0) {
      const bool self = q == p;
      const std::string head = dir + ": cannot make the directory (";
      if (::stat(q.c_str(), &st) != 0) {
        if (S_ISLNK(l.st_mode) && errno == ENOENT) {
          std::string target(4096, '\0');
          const ssize_t n = ::readlink(q.c_str(), target.data(), target.size());
          target.resize(n > 0 ? static_cast<size_t>(n) : 0);
          throw IoError(head + std::strerror(ENOENT) + ": " + (self ? "it" : q.string()) + " is a symbolic link to '" +
                        target + "', which does not exist)" +
                        (self ? "; make that directory first, or choose another output directory" : ""));
        }
        return;  // (a loop of links, a permission: the making says it)
      }
      if (!S_ISDIR(st.st_mode))
        throw IoError(
            head + std::strerror(ENOTDIR) + ": " +
            (self ? "a file of that name exists); choose another output directory" : q.string() + " is a file)"));
      return;
    }
    if (q.parent_path() == q) return;
  }
}
}  // namespace

OutputDirectory::OutputDirectory(const std::string& dir) : dir_(dir) {
  refuse_unusable_output(dir);
  make();
}

void OutputDirectory::make() {
  namespace fs = std::filesystem;
  fs::path p(dir_);  // as given, as lock() and the cleanup name it ("out/" names "out")
  while (p.filename().empty() && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (ec) throw IoError(dir_ + ": cannot make the directory (" + ec.message() + ")");
  // mkdir, not create_directories: whether this call made the directory itself is what the cleanup goes by.
  created_ = ::mkdir(p.c_str(), 0777) == 0;
  if (!created_ && errno != EEXIST) throw IoError(dir_ + ": cannot make the directory (" + std::strerror(errno) + ")");
  if (!created_ && !fs::is_directory(p, ec))  // made meanwhile as something else
    throw IoError(dir_ + ": cannot make the directory (" + std::strerror(ENOTDIR) +
                  ": a file of that name exists); choose another output directory");
}

void OutputDirectory::lock(const std::string& what) {
  if (locked_) return;
  for (int attempt = 0;; ++attempt) {
    switch (take_lock(dir_, &fd_)) {
      case Lock::TAKEN:
      case Lock::NO_FLOCK:
        locked_ = true;
        return;
      case Lock::HELD:  // another holds it: it is the other's, whoever made it (created_ or not, not removed)
        throw IoError(dir_ + ": " + what);
      case Lock::GONE:  // removed by its maker's cleanup (under its lock) since it was made or opened: made again
        if (attempt == kLockAttempts)
          throw IoError(dir_ + ": cannot lock the directory (it was removed " + std::to_string(kLockAttempts) +
                        " times while being locked)");
        make();
        break;
    }
  }
}

OutputDirectory::~OutputDirectory() {
  // Removed only by the holder of its lock that made it, while holding it, and only empty (rmdir takes nothing
  // else). Where the file system has no flock nothing excludes another run that found it meanwhile: it is left.
  if (locked_ && created_ && fd_ >= 0 && is_named(fd_, dir_)) ::rmdir(dir_.c_str());
  if (fd_ >= 0) ::close(fd_);
}

int remove_stale_temp_files(const std::string& path) {
  std::string dir, base, target;
  try {
    target = follow_links(path);  // the writer's temporary files sit beside the file a symlink names
  } catch (const IoError&) {
    return 0;
  }
  split_path(target, &dir, &base);
  const std::string prefix = temp_prefix(base);
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.empty() ? "." : dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && entry.is_regular_file(ec) && std::filesystem::remove(entry.path(), ec)) ++removed;
  }
  return removed;
}

int remove_stale_staging(const std::string& dest) {
  std::string dir, base;
  split_path(dest, &dir, &base);
  const std::string prefix = temp_prefix(base);
  std::error_code ec;
  std::vector<std::filesystem::path> stale;  // (collected first: removing while iterating is unspecified)
  for (const auto& entry : std::filesystem::directory_iterator(dir.empty() ? "." : dir, ec))
    if (entry.path().filename().string().rfind(prefix, 0) == 0 && entry.is_directory(ec)) stale.push_back(entry.path());
  int removed = 0;
  for (const auto& p : stale) removed += std::filesystem::remove_all(p, ec) > 0;
  return removed;
}

namespace {
// Whether `dir`'s flock can be taken now (no live StagedDirectory holds it); false too where flock fails otherwise.
// With `remove`, a directory whose lock was taken is deleted while it is held.
// Staging names are never reused, so the directory named `dir` is the one locked (checked: not renamed away since).
bool take_staging_lock(const std::filesystem::path& dir, bool remove) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool taken = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  struct stat held {
  }, named{};
  const bool same = ::fstat(fd, &held) == 0 && ::lstat(dir.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
                    held.st_ino == named.st_ino;
  std::error_code ec;
  if (taken && same && remove) std::filesystem::remove_all(dir, ec);
  ::close(fd);
  return taken && same;
}
}  // namespace

int remove_abandoned_staging(const std::string& dest) {
  namespace fs = std::filesystem;
  fs::path d = fs::path(dest).lexically_normal();
  if (d.filename().empty()) d = d.parent_path();  // "out/" names "out", as StagedDirectory reads it
  const fs::path parent = d.parent_path().empty() ? fs::path(".") : d.parent_path();
  const std::string prefix = temp_prefix(d.filename().string());
  std::error_code ec;
  std::vector<fs::path> stale;  // (collected first: removing while iterating is unspecified)
  for (const auto& entry : fs::directory_iterator(parent, ec))
    if (entry.path().filename().string().rfind(prefix, 0) == 0 && entry.is_directory(ec) && !entry.is_symlink(ec))
      stale.push_back(entry.path());
  int removed = 0;
  for (const fs::path& p : stale) {
    const std::string name = p.filename().string();
    if (name.ends_with(".old")) {  // a two-rename commit's old directory: its writer's while that one's staging lives
      const fs::path staging = p.parent_path() / name.substr(0, name.size() - 4);
      if (fs::exists(staging, ec) && !take_staging_lock(staging, /*remove=*/false)) continue;
    }
    removed += take_staging_lock(p, /*remove=*/true);
  }
  return removed;
}

}  // namespace tfm::io
