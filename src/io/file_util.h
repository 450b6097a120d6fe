// src/io/file_util.h — the one checked wrapper for file I/O in tfm (read whole file, private
// memory map, atomic write). Every failure throws IoError whose message starts with the path and
// names the failed call and the errno text, e.g.
//   "model.safetensors: open failed: No such file or directory".
// Nothing else in the library calls open/read/write/mmap/rename directly: add the next operation
// here (checked, path in the message) and use it from there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
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

class DirectoryLock;

// The message of a std::filesystem call's failure in this file's form, "<path>: <what>: <errno text>", e.g.
//   "out/config.json: cannot copy file from run/config.json: No space left on device"
// (its own what() is "filesystem error: cannot copy file: No space left on device [run/config.json] [out/...]").
std::string filesystem_error_text(const std::filesystem::filesystem_error& e);

// A directory written whole or not at all: files go into a fresh hidden sibling ".<base>.tmp.<pid>.<n>.<clock>"
// (path(); a name never reused, so no writer takes or deletes another's), and commit() renames it to `dest`. An
// existing `dest` is refused at construction (IoError "<dest>: exists (...)") unless `replace`, when commit() swaps the
// two in one step (renameat2's RENAME_EXCHANGE; where the file system lacks it, two renames) and deletes the old one
// only after the new one is in place. Replacing an existing `dest`, it holds `dest`'s lock (lock_for_replacing) from
// construction — or from commit(), for a `dest` made meanwhile — until the new directory is in place: a `dest` a
// training run works in, or another writer replaces, is refused, not swapped away under it. A caller that took that
// lock itself before longer work (tfm quantize) hands it over as `dest_lock`. `sources`, the paths the new directory
// is made from, are checked with refuse_output_holding (replacing `dest` must not delete them). Destroyed without
// commit(), the staging directory is deleted. While it lives it holds an exclusive flock on its staging directory,
// which the kernel releases when the process dies, however it dies: remove_abandoned_staging tells a live writer's
// staging from a killed one's by it (where the file system has no flock on directories, none is held).
// Errors are said of `dest` as the caller gave it, never of the staging directory (gone when the message is read):
// write() runs the caller's writing and rethrows its errors so (said_of_dest).
class StagedDirectory {
 public:
  StagedDirectory(const std::string& dest, bool replace, const std::vector<std::string>& sources = {},
                  std::unique_ptr<DirectoryLock> dest_lock = nullptr);
  ~StagedDirectory();  // never throws
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::string& path() const { return temp_; }  // where to write
  // Calls write(path()); what it throws is rethrown said of `dest` (said_of_dest): IoError, SafeTensorsError and
  // std::invalid_argument keep their type, a std::filesystem error becomes IoError (filesystem_error_text), any other
  // std::runtime_error IoError.
  void write(const std::function<void(const std::string& dir)>& write);
  // `message` with the staging directory's path, wherever it appears, replaced by `dest` as the caller gave it.
  std::string said_of_dest(std::string message) const;
  void commit();  // the new directory in place, it holds no lock

 private:
  void release_locks();
  std::string dest_, given_, temp_;  // dest_: normalized; given_: as the caller gave it (for messages)
  int lock_fd_ = -1;  // temp_ opened, holding its flock (−1: none)
  std::unique_ptr<DirectoryLock> dest_lock_;  // an existing dest's, while it is being replaced
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
// refused with IoError "<dir>: <what>". The lock is on the directory `dir` names once it is held: one removed or
// replaced (renamed over) between the open and the flock is not the one locked, and the one named now is locked
// instead. A file system without flock on directories is not refused (the lock is then not taken).
class DirectoryLock {
 public:
  DirectoryLock(const std::string& dir, const std::string& what);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  // Whether the directory locked is the one `dir` names now (true where no lock could be taken: NO_FLOCK).
  bool names(const std::string& dir) const;

 private:
  friend std::unique_ptr<DirectoryLock> lock_for_replacing(const std::string& dest);
  DirectoryLock() = default;
  int fd_ = -1;
};

// The one check of every writer that replaces an existing directory whole (tfm quantize, import gpt2 and export
// gpt2 with --force, through StagedDirectory): the lock of `dest` (DirectoryLock), which a training run holds on its
// directory for the run's life (OutputDirectory) and a replacing writer until its new directory is in place — so
// that neither a running run's directory nor one another writer is replacing is swapped away. Null when `dest` is
// not an existing directory (nothing to replace). Throws IoError
//   "<dest>: a tfm train is running in this directory, or a tfm quantize, import or export is replacing it (it holds
//    the directory's lock): wait for it to end, or write into another --out".
std::unique_ptr<DirectoryLock> lock_for_replacing(const std::string& dest);

// The directory a writer works in in place for a long time (a training run's --out), claimed for it in two steps:
//   OutputDirectory out(dir);  // made when missing, with its parents: created() says whether this call made it
//   out.lock(what);            // its DirectoryLock, held until destruction; IoError "<dir>: <what>" when another holds
//   it
// Only the holder of the lock may delete the directory: destroyed while holding it, an OutputDirectory that made the
// directory removes it again when it is empty (the work failed before writing anything there), before releasing the
// lock (where the file system has no flock, nothing excludes another run: it is left). One that made it but was
// refused the lock leaves it alone: between its making and its locking another
// process may have locked it and be working in it. And the lock is taken on the directory the path names: one removed
// meanwhile (by its maker's cleanup, under its lock) is made again and locked. So two processes claiming one new
// directory at once end with one of them working in it and the other refused, whatever the interleaving.
// Refused before anything is made, IoError said of `dir` (with the errno text a file error carries): a path that
// exists and is not a directory, a dangling symbolic link, and a parent of either kind:
//   "<dir>: cannot make the directory (Not a directory: a file of that name exists); choose another output directory"
//   "<dir>: cannot make the directory (No such file or directory: it is a symbolic link to '<target>', which does not
//    exist); make that directory first, or choose another output directory"
//   "<dir>: cannot make the directory (Not a directory: <parent> is a file)" (a parent link likewise).
class OutputDirectory {
 public:
  explicit OutputDirectory(const std::string& dir);
  ~OutputDirectory();  // never throws
  OutputDirectory(const OutputDirectory&) = delete;
  OutputDirectory& operator=(const OutputDirectory&) = delete;

  void lock(const std::string& what);
  bool created() const { return created_; }  // the directory (locked, once lock() returned) was made by this one

 private:
  void make();
  std::string dir_;  // as given
  bool created_ = false, locked_ = false;
  int fd_ = -1;  // the locked directory (−1: not locked, or no flock on this file system)
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
