// src/io/file_util.h — the one checked wrapper for file I/O in tfm (read whole file, private
// memory map, atomic write). Every failure throws IoError whose message starts with the path and
// names the failed call and the errno text, e.g.
//   "model.safetensors: open failed: No such file or directory".
// Nothing else in the library calls open/read/write/mmap/rename directly: add the next operation
// here (checked, path in the message) and use it from there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace tfm::io {

class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads a whole regular file into a string (binary, no newline conversion).
std::string read_file(const std::string& path);

// A private memory map of a whole regular file. A zero-length file is "mapped" as
// data() == nullptr, size() == 0 (mmap cannot map zero bytes). The mapping stays valid until the
// object dies; the bytes are untrusted input. If another process truncates the file while it is
// mapped, touching the lost pages raises SIGBUS: callers that keep a map beyond reading it (zero-copy
// tensors, io::LoadOptions) document the hazard to their users; the others copy what they need and drop it.
//   ReadOnly:    PROT_READ, MAP_PRIVATE; writes through the pointer fault.
//   CopyOnWrite: PROT_READ | PROT_WRITE, MAP_PRIVATE; a write copies the touched page into this
//                process's private memory, so it never reaches the file or other mappers.
class MappedFile {
 public:
  enum class Access { ReadOnly, CopyOnWrite };
  explicit MappedFile(const std::string& path, Access access = Access::ReadOnly);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  // CopyOnWrite only (throws IoError for a ReadOnly map, whose pages must not be written).
  uint8_t* mutable_data() const;
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  Access access_ = Access::ReadOnly;
};

// Writes a file atomically: bytes go to a fresh temporary file in the destination's directory
// (so rename stays on one file system), which commit() fsyncs, closes and renames over `path`,
// then fsyncs the directory. Until commit() returns, `path` keeps its previous content (or stays
// absent); if the writer is destroyed without commit() (an exception on the way), the temporary
// file is removed. The new file gets mode 0666 filtered by the umask, like an ordinary create.
// A symlink is followed (the file it names is replaced, in that file's directory; a loop of links throws);
// a device or FIFO (/dev/null, a named pipe: opening one waits for its reader) is written in place, not
// atomically, as a shell writes it; a name for an open descriptor (/dev/stdout, /dev/fd/N, /proc/self/fd/N) is
// written through that descriptor, wherever it points (a file opened for appending keeps its bytes).
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();  // removes the temporary file unless committed; never throws
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* bytes, size_t n);  // appends; retries short writes and EINTR
  // fsync + close: the bytes are on disk (a full disk is reported here at the latest), not yet in place.
  // For a set of files that should change together: sync() every writer, then commit() each.
  void sync();
  void commit();                            // sync() unless done, rename + fsync(dir); once

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string path_;
  std::string target_;     // path_ with its symlinks followed: what the temporary file is renamed over
  std::string temp_path_;  // empty when written in place
  int fd_ = -1;
  bool synced_ = false, committed_ = false, in_place_ = false;
};

// One-shot form: write_file_atomic(path, s) == AtomicFileWriter w(path); w.write(s); w.commit().
void write_file_atomic(const std::string& path, const std::string& bytes);

// A directory written whole or not at all: files go into a fresh hidden sibling ".<base>.tmp.<pid>.<n>.<clock>"
// (path(); a name never reused, so no writer takes or deletes another's), and commit() renames it to `dest`. An
// existing `dest` is refused at construction (IoError "<dest>: exists (...)") unless `replace`, when commit() swaps the
// two in one step (renameat2's RENAME_EXCHANGE; where the file system lacks it, two renames) and deletes the old one
// only after the new one is in place. `sources`, the paths the new directory is made from, are checked
// with refuse_output_holding (replacing `dest` must not delete them). Destroyed without commit(), the
// staging directory is deleted. While it lives it holds an exclusive flock on its staging directory, which the
// kernel releases when the process dies, however it dies: remove_abandoned_staging tells a live writer's staging
// from a killed one's by it (where the file system has no flock on directories, none is held).
class StagedDirectory {
 public:
  StagedDirectory(const std::string& dest, bool replace, const std::vector<std::string>& sources = {});
  ~StagedDirectory();  // never throws
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::string& path() const { return temp_; }  // where to write
  void commit();

 private:
  std::string dest_, temp_;
  int lock_fd_ = -1;  // temp_ opened, holding its flock (−1: none)
  bool replace_ = false, committed_ = false;
};

// Throws IoError when the output directory `dest` is `source` or holds it, or holds what a symlink in the
// directory `source` links to (paths compared after resolving symlinks and ".."): replacing the output would
// delete what it is made from.
void refuse_output_holding(const std::string& dest, const std::string& source);

// Throws IoError "<dir>: cannot write files there (Permission denied)" when a file cannot be created in
// the existing directory `dir` (read-only, not ours, a read-only file system): said before long work
// whose results would go there, not after it. Leaves nothing behind.
void require_writable_directory(const std::string& dir);

// An exclusive advisory lock (flock) on the existing directory `dir` itself, held until destruction (or the
// process's end, however it ends): a second holder — another process, or another DirectoryLock in this one — is
// refused with IoError "<dir>: <what> (...)". A file system without flock on directories is not refused (the lock
// is then not taken).
class DirectoryLock {
 public:
  DirectoryLock(const std::string& dir, const std::string& what);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

// The start of the name of a temporary file (AtomicFileWriter) or staging directory (StagedDirectory) a writer of
// the file or directory `base` makes beside it: ".<base>.tmp.", base cut so that a name near NAME_MAX still fits.
std::string temp_prefix(const std::string& base);
// Deletes the temporary files ".<base>.tmp.*" that an AtomicFileWriter for `path` left behind when its
// process was killed mid-write (the real file is untouched; beside the file a symlink names, as the writer puts
// them). Returns how many were removed.
int remove_stale_temp_files(const std::string& path);
// The same for a StagedDirectory of `dest`: deletes the staging directories ".<base>.tmp.*" (their ".old" too)
// that one left behind when its process was killed mid-write; `dest` is untouched. The caller knows that no
// StagedDirectory of `dest` is being written (it holds the lock of what holds it). Returns how many were removed.
int remove_stale_staging(const std::string& dest);
// The same for a caller that holds no lock: deletes only the staging directories of `dest` whose writer is gone,
// i.e. those whose flock (StagedDirectory's) it can take, so a StagedDirectory of `dest` that a live process is
// writing is left alone — another machine's too, on a shared file system whose flocks reach every client (a pid
// in the name cannot tell: it may be another machine's, or reused). A ".old" beside a live one's staging is its
// own, and stays. Where the file system has no flock on directories nothing can be told and nothing is removed;
// where its flocks are local to each client (NFS mounted with local_lock=flock or all), another machine's live
// writer cannot be told from a killed one: there, one machine at a time may write an output. Returns how many were
// removed.
int remove_abandoned_staging(const std::string& dest);

}  // namespace tfm::io
