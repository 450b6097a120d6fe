// tests/io/file_util_test.cc — the checked file wrapper (src/io/file_util.h): whole-file read, the
// private map of an empty file, the error message (path, failed call, errno text), and the atomic
// writer, which commits only on finish and removes its temporary file when abandoned. The
// failures of save_safetensors built on it (full disk, missing directory) are in
// safetensors_test.cc.
// To add a case: a TEST in a fresh temp_dir, removed at its end.
#include "io/file_util.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "tfm/io/safetensors.h"

namespace tfm::io {
namespace {

namespace fs = std::filesystem;

TEST(FileUtil, ReadAndAtomicWrite) {
  const fs::path dir = testing::temp_dir("file_util");
  const std::string p = (dir / "f.bin").string();
  write_file_atomic(p, std::string("a\0b", 3));
  EXPECT_EQ(read_file(p), std::string("a\0b", 3));
  const MappedFile m(p);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m.data()[2], 'b');
  write_file_atomic(p, "");
  EXPECT_EQ(read_file(p), "");
  const MappedFile empty(p);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
  const std::string missing = (dir / "missing").string();
  try {
    read_file(missing);
    ADD_FAILURE() << "no exception";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), missing + ": open failed: " + std::strerror(ENOENT));
  }
  {  // an abandoned writer removes its temporary file and leaves the target alone
    AtomicFileWriter w(p);
    w.write("xyz", 3);
    EXPECT_TRUE(fs::exists(w.temp_path()));
    EXPECT_EQ(fs::path(w.temp_path()).parent_path(), dir);
  }
  EXPECT_EQ(read_file(p), "");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

// A symlink is followed (the file it names is replaced, the link stays a link; a dangling link's target is
// created); a FIFO is written in place, as a shell's redirection writes it (renaming over it would replace the node:
// as root, over /dev/null, for every process), and is refused as an input at once (an open would wait for a writer).
TEST(FileUtil, AtomicWriteFollowsSymlinksAndWritesFifosInPlace) {
  const fs::path dir = testing::temp_dir("file_util_links");
  const std::string file = (dir / "real.bin").string(), link = (dir / "link.bin").string();
  write_file_atomic(file, "old");
  fs::create_symlink("real.bin", link);
  write_file_atomic(link, "new");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_file(file), "new");
  const std::string dangling = (dir / "dangling.bin").string();
  fs::create_symlink("sub/made.bin", dangling);
  fs::create_directory(dir / "sub");
  write_file_atomic(dangling, "made");
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_EQ(read_file((dir / "sub" / "made.bin").string()), "made");

  {  // a killed write through the link leaves its temporary file beside the linked file: the cleanup finds it there
    AtomicFileWriter abandoned(link);
    abandoned.write("x", 1);
    EXPECT_EQ(fs::path(abandoned.temp_path()).parent_path(), dir);
    EXPECT_EQ(remove_stale_temp_files(link), 1);
  }
  fs::create_symlink("loop_b", dir / "loop_a");  // a loop of links: refused, neither link replaced
  fs::create_symlink("loop_a", dir / "loop_b");
  EXPECT_THROW(write_file_atomic((dir / "loop_a").string(), "x"), IoError);
  EXPECT_TRUE(fs::is_symlink(dir / "loop_a") && fs::is_symlink(dir / "loop_b"));
  // A name for an open descriptor is written through it: a file opened for appending keeps its bytes (a rename
  // over /proc/self/fd/N would have replaced them).
  const std::string log = (dir / "log.txt").string();
  write_file_atomic(log, "before,");
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  write_file_atomic("/proc/self/fd/" + std::to_string(fd), "after");
  ::close(fd);
  EXPECT_EQ(read_file(log), "before,after");

  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] {
    std::ifstream in(fifo, std::ios::binary);
    got.assign(std::istreambuf_iterator<char>(in), {});
  });
  write_file_atomic(fifo, "through the pipe");
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fifo));  // still the FIFO, not a file renamed over it
  try {
    read_file(fifo);  // no writer: refused at once, not waited on
    ADD_FAILURE() << "a FIFO was read";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), fifo + ": not a regular file");
  }
  fs::remove_all(dir);
}

// A name near NAME_MAX (255 bytes) can be written: the temporary file's name cuts the name to leave room for its
// suffix, and the stale-file cleanup finds it by the same cut.
TEST(FileUtil, ANameNearNameMaxIsWritten) {
  const fs::path dir = testing::temp_dir("file_util_long");
  const std::string path = (dir / std::string(250, 'n')).string();
  write_file_atomic(path, "long");
  EXPECT_EQ(read_file(path), "long");
  {
    AtomicFileWriter abandoned(path);  // as a killed writer leaves it: the temporary file in place
    abandoned.write("x", 1);
    const std::string temp = abandoned.temp_path();
    EXPECT_LE(fs::path(temp).filename().string().size(), 255u);
    write_file_atomic(temp + ".copy", "");  // (a second stale file, by the same prefix)
    EXPECT_EQ(remove_stale_temp_files(path), 2);
    EXPECT_FALSE(fs::exists(temp));
  }
  StagedDirectory staged((dir / std::string(250, 'd')).string(), false);
  staged.commit();
  EXPECT_TRUE(fs::is_directory(dir / std::string(250, 'd')));
  {
    // A killed writer's staging directory (and the ".old" beside it) goes; the directory itself stays.
    StagedDirectory abandoned((dir / std::string(250, 'd')).string(), true);
    fs::create_directories(abandoned.path() + ".old");
    write_file_atomic(abandoned.path() + "/model.safetensors", "partial");
    EXPECT_EQ(remove_stale_staging((dir / std::string(250, 'd')).string()), 2);
    EXPECT_FALSE(fs::exists(abandoned.path()));
    EXPECT_TRUE(fs::is_directory(dir / std::string(250, 'd')));
  }
  fs::remove_all(dir);
}

// An output directory may not hold its source, nor what a symlink in the source links to (a --force would delete
// it); a source beside the output is fine.
TEST(FileUtil, OutputHoldingItsSourceIsRefused) {
  const fs::path dir = testing::temp_dir("file_util_holding");
  fs::create_directories(dir / "out");
  fs::create_directories(dir / "model");
  write_file_atomic((dir / "out" / "model.safetensors").string(), "weights");
  EXPECT_NO_THROW(refuse_output_holding((dir / "out").string(), (dir / "model").string()));
  EXPECT_THROW(refuse_output_holding((dir / "out").string(), (dir / "out" / "x").string()), IoError);
  fs::create_symlink(dir / "out" / "model.safetensors", dir / "model" / "model.safetensors");
  try {
    refuse_output_holding((dir / "out").string(), (dir / "model").string());
    ADD_FAILURE() << "a source linking into the output was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("which " + (dir / "model" / "model.safetensors").string() + " links to"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// A staged directory appears whole at commit, never before; without commit nothing is left; an
// existing destination is refused unless replacing, and then swapped only at commit.
TEST(FileUtil, StagedDirectoryAppearsWholeOrNotAtAll) {
  const std::string root = testing::temp_dir("staged");
  const std::string dest = root + "/out";
  {
    StagedDirectory d(dest + "/", /*replace=*/false);  // a trailing slash names the same directory
    write_file_atomic(d.path() + "/a.txt", "one");
    EXPECT_FALSE(fs::exists(dest));
  }  // no commit
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 0);
  {
    StagedDirectory d(dest, false);
    write_file_atomic(d.path() + "/a.txt", "one");
    d.commit();
  }
  EXPECT_EQ(testing::slurp(dest + "/a.txt"), "one");
  try {
    StagedDirectory d(dest, false);
    FAIL() << "an existing destination was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(dest + ": exists"), std::string::npos) << e.what();
  }
  {
    StagedDirectory d(dest, /*replace=*/true);
    write_file_atomic(d.path() + "/b.txt", "two");
    EXPECT_EQ(testing::slurp(dest + "/a.txt"), "one");  // the old one stays until commit
    d.commit();
  }
  EXPECT_FALSE(fs::exists(dest + "/a.txt"));
  EXPECT_EQ(testing::slurp(dest + "/b.txt"), "two");
  EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 1);  // no leftovers
}

// A directory no file can be created in is said at once, naming it; a writable one is left as it was.
// One holder at a time, within one process too (flock locks an open file description); released with its holder.
// Two writers of one output never share a staging name (a pid alone would: another machine's, or a reused one),
// and remove_abandoned_staging deletes a killed writer's (unlocked) staging but never a live writer's (locked).
TEST(FileUtil, StagingNamesAreNeverSharedAndOnlyAbandonedOnesGo) {
  const fs::path dir = testing::temp_dir("file_util_staging");
  const std::string out = (dir / "out").string();
  const std::string killed = (dir / (".out.tmp." + std::to_string(::getpid()))).string();  // an old-style name
  fs::create_directories(killed);
  write_file_atomic(killed + "/model.safetensors", "partial");
  {
    StagedDirectory a(out, true), b(out, true);
    EXPECT_NE(a.path(), b.path());
    EXPECT_TRUE(fs::exists(killed)) << "a writer deletes no other staging directory";
    write_file_atomic(a.path() + "/model.safetensors", "a");
    EXPECT_EQ(remove_abandoned_staging(out), 1);  // the killed one only
    EXPECT_FALSE(fs::exists(killed));
    EXPECT_EQ(read_file(a.path() + "/model.safetensors"), "a");
    EXPECT_TRUE(fs::is_directory(b.path()));
    a.commit();
  }
  EXPECT_EQ(read_file(out + "/model.safetensors"), "a");
  EXPECT_EQ(remove_abandoned_staging(out), 0);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"out"});
  fs::remove_all(dir);
}

TEST(FileUtil, DirectoryLockHasOneHolder) {
  const std::string d = testing::temp_dir("dir_lock");
  {
    DirectoryLock first(d, "in use");
    try {
      DirectoryLock second(d, "in use");
      ADD_FAILURE() << "a second lock was taken";
    } catch (const IoError& e) {
      EXPECT_EQ(std::string(e.what()), d + ": in use");
    }
  }
  DirectoryLock again(d, "in use");  // the first is gone
  EXPECT_THROW(DirectoryLock(d + "/missing", "in use"), IoError);
  fs::remove_all(d);
}

// Two processes claiming one new output directory (two `tfm train --out d` started together): B makes it, A —
// which found it made — locks it first, B's lock is refused. The directory is A's, whoever made it: B, destroyed after
// its refusal, must not remove it (A would train into a directory without a name, and a third run would make and
// lock a new one beside it). The interleaving, written out with the two steps OutputDirectory claims in.
TEST(FileUtil, OutputDirectoryMadeByARefusedClaimantIsLeftToItsHolder) {
  const std::string root = testing::temp_dir("out_dir_race"), d = root + "/run";
  auto b = std::make_unique<OutputDirectory>(d);
  EXPECT_TRUE(b->created());
  OutputDirectory a(d);
  EXPECT_FALSE(a.created());
  a.lock("held by A");
  try {
    b->lock("in use");
    ADD_FAILURE() << "B locked the directory A holds";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), d + ": in use");
  }
  b.reset();
  EXPECT_TRUE(fs::is_directory(d)) << "the refused claimant that made the directory removed the one A holds";
  // A's lock is on the directory named d (a third claimant is refused, it does not make another).
  OutputDirectory c(d);
  EXPECT_FALSE(c.created());
  EXPECT_THROW(c.lock("in use"), IoError);
  EXPECT_THROW(DirectoryLock(d, "in use"), IoError);
  fs::remove_all(root);
}

// The holder that made the directory removes it again when the work left it empty (under its lock); a claimant that
// found it made meanwhile finds it gone when it locks: it makes it again and holds that one (it is then its maker).
// One that did not make the directory never removes it, and nothing but an empty one is removed.
TEST(FileUtil, OutputDirectoryIsRemovedOnlyByItsMakerHoldingItsLock) {
  const std::string root = testing::temp_dir("out_dir_cleanup"), d = root + "/a/run";
  auto a = std::make_unique<OutputDirectory>(d);  // (its parents made too)
  a->lock("held by A");
  OutputDirectory c(d);
  EXPECT_FALSE(c.created());
  a.reset();
  EXPECT_FALSE(fs::exists(d)) << "A made it, held it and left it empty";
  c.lock("in use");
  EXPECT_TRUE(c.created());
  EXPECT_TRUE(fs::is_directory(d));
  EXPECT_THROW(DirectoryLock(d, "in use"), IoError) << "C holds the directory named d";
  {
    OutputDirectory again(d);  // found, not made: kept however it ends
    EXPECT_FALSE(again.created());
  }
  EXPECT_TRUE(fs::is_directory(d));
  const std::string kept = root + "/kept";
  {
    OutputDirectory k(kept);
    k.lock("in use");
    std::ofstream(kept + "/f") << "x";  // the work wrote there: kept
  }
  EXPECT_TRUE(fs::exists(kept + "/f"));
  fs::remove_all(root);
}

// An output directory path that cannot be one is refused by name before anything is made: a file, a dangling
// symbolic link (naming its target), and a parent that is either.
TEST(FileUtil, OutputDirectoryRefusesAFileOrADanglingLinkByName) {
  const std::string root = testing::temp_dir("out_dir_bad");
  std::ofstream(root + "/afile") << "x";
  fs::create_symlink("nowhere/dir", root + "/link");
  const auto message = [](const std::string& dir) {
    try {
      OutputDirectory out(dir);
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message(root + "/afile"), root +
                                          "/afile: cannot make the directory (Not a directory: a file of that name "
                                          "exists); choose another output directory");
  EXPECT_EQ(message(root + "/link"),
            root +
                "/link: cannot make the directory (No such file or directory: it is a symbolic "
                "link to 'nowhere/dir', which does not exist); make that directory first, or "
                "choose another output directory");
  EXPECT_EQ(message(root + "/afile/run"),
            root + "/afile/run: cannot make the directory (Not a directory: " + root + "/afile is a file)");
  EXPECT_EQ(message(root + "/link/run"), root + "/link/run: cannot make the directory (No such file or directory: " +
                                             root + "/link is a symbolic link to 'nowhere/dir', which does not exist)");
  EXPECT_FALSE(fs::exists(root + "/nowhere"));
  fs::create_directories(root + "/real");
  fs::create_symlink("real", root + "/good");
  {
    OutputDirectory through(root + "/good");  // a link to a directory is that directory
    EXPECT_FALSE(through.created());
    through.lock("in use");
    EXPECT_THROW(DirectoryLock(root + "/real", "in use"), IoError);
  }
  EXPECT_TRUE(fs::is_directory(root + "/real"));
  fs::remove_all(root);
}

// A writer's errors inside a staging directory are said of the destination as the caller gave it (the staging
// directory is gone when the message is read), keeping their type; a std::filesystem error (copy_file's) takes the
// "<file>: <what>" form.
TEST(FileUtil, StagedDirectoryErrorsAreSaidOfTheDestination) {
  const std::string root = testing::temp_dir("staged_errors"), out = root + "/out";
  StagedDirectory staged(out + "/", /*replace=*/false);
  const std::string tmp = staged.path();
  try {
    staged.write([](const std::string& d) { throw IoError(d + "/model.safetensors: write failed: No space left"); });
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), out + "/model.safetensors: write failed: No space left");
  }
  try {
    staged.write([](const std::string& d) { throw std::invalid_argument(d + ": two BPEs"); });
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), out + ": two BPEs");
  }
  try {
    staged.write([](const std::string& d) { throw SafeTensorsError(d + "/m: write failed"); });
    ADD_FAILURE();
  } catch (const SafeTensorsError& e) {
    EXPECT_EQ(std::string(e.what()), out + "/m: write failed");
  }
  try {
    staged.write([&](const std::string& d) { fs::copy_file(root + "/missing.json", d + "/config.json"); });
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()),
              out + "/config.json: cannot copy file from " + root + "/missing.json: " + std::strerror(ENOENT));
  }
  staged.write([](const std::string& d) { write_file_atomic(d + "/f", "x"); });
  staged.commit();
  EXPECT_EQ(read_file(out + "/f"), "x");
  EXPECT_FALSE(fs::exists(tmp));
  fs::remove_all(root);
}

// Every writer that replaces a directory whole holds its lock while it does (lock_for_replacing, through
// StagedDirectory): a directory a training run holds is refused, and so is one another replacing writer holds (two
// `tfm quantize --force` into one --out: the second is told who may hold it, not only "a tfm train"). A directory made
// after the writer started is locked at its commit. Nothing is replaced when refused.
TEST(FileUtil, ReplacingADirectoryTakesItsLock) {
  const std::string root = testing::temp_dir("replace_lock"), out = root + "/out";
  const std::string held = out +
                           ": a tfm train is running in this directory, or a tfm quantize, import or export is "
                           "replacing it (it holds the directory's lock): wait for it to end, or write into another "
                           "--out";
  fs::create_directories(out);
  write_file_atomic(out + "/old", "old");
  EXPECT_EQ(lock_for_replacing(root + "/absent"), nullptr);
  {
    OutputDirectory run(out);  // a training run in it
    run.lock("a run");
    try {
      StagedDirectory replacing(out, /*replace=*/true);
      ADD_FAILURE() << "replaced a directory a run holds";
    } catch (const IoError& e) {
      EXPECT_EQ(std::string(e.what()), held);
    }
  }
  {
    StagedDirectory first(out, /*replace=*/true);
    try {
      StagedDirectory second(out, /*replace=*/true);
      ADD_FAILURE() << "two writers replace one directory at once";
    } catch (const IoError& e) {
      EXPECT_EQ(std::string(e.what()), held);
    }
    EXPECT_THROW(DirectoryLock(out, "a run"), IoError) << "a run starting there while it is replaced";
    first.write([](const std::string& d) { write_file_atomic(d + "/new", "new"); });
    first.commit();
  }
  EXPECT_EQ(read_file(out + "/new"), "new");
  EXPECT_FALSE(fs::exists(out + "/old"));
  const std::string later = root + "/later";
  StagedDirectory staged(later, /*replace=*/true);  // nothing to replace yet
  fs::create_directories(later);
  {
    DirectoryLock run(later, "a run");  // made and locked by a run meanwhile
    EXPECT_THROW(staged.commit(), IoError);
  }
  EXPECT_TRUE(fs::is_empty(later)) << "the run's directory was swapped away";
  // The lock taken at construction is of the directory named then: moved aside and made again meanwhile, the new
  // one is a run's (mv out out.bak; tfm train --out out), and commit must not swap it away.
  {
    StagedDirectory replacing(out, /*replace=*/true);
    fs::rename(out, root + "/out.bak");
    fs::create_directories(out);
    write_file_atomic(out + "/checkpoint", "run");
    DirectoryLock run(out, "a run");
    replacing.write([](const std::string& d) { write_file_atomic(d + "/new", "new"); });
    try {
      replacing.commit();
      ADD_FAILURE() << "swapped away a directory made and locked after the writer's lock was taken";
    } catch (const IoError& e) {
      EXPECT_EQ(std::string(e.what()), held);
    }
  }
  EXPECT_EQ(read_file(out + "/checkpoint"), "run");
  // One spelling for the lock and the renames: "link/../out" is out beside the link's target, not ./out.
  fs::create_directories(root + "/elsewhere/target");
  fs::create_directory_symlink(root + "/elsewhere/target", root + "/link");
  {
    DirectoryLock run(out, "a run");  // root/out, which root/link/../out does not name
    StagedDirectory other(root + "/link/../out", /*replace=*/true);
    other.write([](const std::string& d) { write_file_atomic(d + "/new", "other"); });
    other.commit();
  }
  EXPECT_EQ(read_file(out + "/checkpoint"), "run");
  EXPECT_EQ(read_file(root + "/elsewhere/out/new"), "other");
  fs::remove_all(root);
}

TEST(FileUtil, RequireWritableDirectory) {
  const std::string d = testing::temp_dir("writable");
  require_writable_directory(d);
  EXPECT_TRUE(fs::is_empty(d));
  std::string locked = d + "/locked";
  fs::create_directory(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
  if (::geteuid() == 0) {  // permissions do not stop root: sysfs refuses new files to everyone
    fs::permissions(locked, fs::perms::owner_all);
    if (!fs::is_directory("/sys/kernel")) GTEST_SKIP() << "running as root without /sys";
    locked = "/sys/kernel";
  }
  try {
    require_writable_directory(locked);
    ADD_FAILURE() << "no error for " << locked;
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(locked + ": cannot write files there (", 0), 0u) << e.what();
  }
  fs::permissions(d + "/locked", fs::perms::owner_all);
}

}  // namespace
}  // namespace tfm::io
