// What a trial's output becomes, end to end through `tune run` (docs/programs.md, "When
// a trial fails"; docs/run.md): a failed trial's error is the cause that its standard
// error names (a Python traceback's exception, not the warnings printed after it), the
// end of the run names each kind of error once, and its standard error is kept in the
// experiment folder as it was written.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "harness.hpp"
#include "tune/tuner/store.hpp"

namespace tune::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string py() { return ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto p = text.find(part); p != std::string::npos; p = text.find(part, p + 1)) ++n;
  return n;
}

class TrialOutputTest : public ::testing::Test {
 protected:
  cluster_files files;
  std::string project = files.dir() + "/project", exp = files.dir() + "/exp";

  void SetUp() override { fs::create_directories(project); }

  void write(const std::string& name, const std::string& text) {
    std::ofstream(project + "/" + name, std::ios::binary) << text;
  }

  // tune run ARGS in the project, on an embedded cluster; no card visible.
  run_result tune_run(std::vector<std::string> args, std::chrono::seconds timeout = 90s) {
    std::vector<std::string> argv{tune_binary(), "run"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run(argv, {{"CUDA_VISIBLE_DEVICES", ""}}, timeout, project);
    if (std::getenv("PROGRAM_TEST_DEBUG")) std::cerr << r.err;
    return r;
  }

  // The last line of standard output: tune run's JSON (null when it is not JSON).
  static nlohmann::json summary(const run_result& r) {
    auto end = r.out.find_last_not_of('\n');
    if (end == std::string::npos) return nullptr;
    auto start = r.out.rfind('\n', end);
    auto j = nlohmann::json::parse(r.out.substr(start == std::string::npos ? 0 : start + 1), nullptr, false);
    return j.is_discarded() ? nlohmann::json() : j;
  }

  std::vector<trial_row> trials() {
    auto s = experiment_store::open(exp);
    EXPECT_TRUE(s) << s.error().message();
    if (!s) return {};
    auto t = (*s)->trials();
    EXPECT_TRUE(t) << t.error().message();
    return t ? *t : std::vector<trial_row>{};
  }
};

// A torchvision download that fails, then a warning printed at the interpreter's exit:
// the error is the download's, the summary says it once for the two trials that had it.
TEST_F(TrialOutputTest, AFailedTrialsErrorIsItsTracebacksExceptionNotTheWarningsAfterIt) {
  write("fail.py", R"(import atexit, os, sys, warnings
atexit.register(lambda: warnings.warn("`torch.distributed.reduce_op` is deprecated", FutureWarning))
print("downloading", file=sys.stderr)
def download(name):
    raise RuntimeError("Error downloading " + name)
if os.environ["TUNE_TRIAL_ID"].endswith("3"):
    {}["lr"]
download("train-images-idx3-ubyte.gz")
)");
  auto r = tune_run({"--metric", "acc", "--samples", "3", "--experiment-dir", exp, "--progress", "lines", "--", py(), "fail.py"});
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_EQ(summary(r)["errors"], 3) << r.out;
  auto all = trials();
  ASSERT_EQ(all.size(), 3u);
  for (auto& t : all) {
    bool key = t.id == "trial-00003";
    EXPECT_EQ(t.error, std::string{"the trial's process ended with exit code 1: "} +
                           (key ? "KeyError: 'lr'" : "RuntimeError: Error downloading train-images-idx3-ubyte.gz"))
        << t.id;
    auto tail = t.info.value("stderr_tail", "");
    EXPECT_TRUE(contains(tail, "Traceback") && contains(tail, "FutureWarning")) << "the whole tail stays: " << tail;
    EXPECT_EQ(read_all(exp + "/trials/" + t.id + "/stderr"), tail) << t.id;
  }
  // Each kind once, the most frequent first, with the first such trial's standard error.
  EXPECT_EQ(count(r.err, "trials: RuntimeError"), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "tune: 2 trials: RuntimeError: Error downloading train-images-idx3-ubyte.gz (see " + exp +
                                  "/trials/trial-00001/stderr)\n"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "tune: 1 trial: KeyError: 'lr' (see " + exp + "/trials/trial-00003/stderr)\n")) << r.err;
  EXPECT_LT(r.err.find("2 trials: RuntimeError"), r.err.find("1 trial: KeyError")) << r.err;
}

// No summary when nothing failed; a program that is not Python: its last line that is
// not a warning.
TEST_F(TrialOutputTest, AProgramThatIsNotPythonFailsWithItsLastLineThatIsNotAWarning) {
  write("fail.sh", "#!/bin/sh\necho 'ls: cannot access data: No such file or directory' >&2\n"
                   "echo 'warning: leaked 1 semaphore' >&2\nexit 2\n");
  fs::permissions(project + "/fail.sh", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                            fs::perms::others_read | fs::perms::others_exec);
  auto r = tune_run({"--metric", "acc", "--experiment-dir", exp, "--progress", "lines", "--", "./fail.sh"});
  EXPECT_EQ(r.rc, 1) << r.err;
  auto all = trials();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].error, "the trial's process ended with exit code 2: ls: cannot access data: No such file or directory");
  EXPECT_TRUE(contains(r.err, "tune: 1 trial: ls: cannot access data")) << r.err;
  fs::remove_all(exp);
  write("ok.py", "import libtune\nlibtune.report(acc=1.0)\n");
  auto ok = tune_run({"--metric", "acc", "--experiment-dir", exp, "--progress", "lines", "--", py(), "ok.py"});
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_FALSE(contains(ok.err, " trial: ")) << ok.err;
  EXPECT_FALSE(fs::exists(exp + "/trials")) << "a trial that did not fail leaves no standard error behind";
}

// The two of issue 39: a trial that writes bytes that are not UTF-8 on its standard
// error (the controller died of it and tune run hung, tune resume too), and a working
// directory with a file whose name is not UTF-8 (tune run aborted before any trial).
// Shown text has U+FFFD for them; the name reaches the trial's copy byte for byte.
TEST_F(TrialOutputTest, BytesThatAreNotUtf8InOutputAndFileNamesNeitherCrashNorHang) {
  const std::string name = "bad\xffname.txt";
  write(name, "exact");
  write("bad.py", R"(import sys
if open(b"bad\xffname.txt", "rb").read() != b"exact":
    sys.exit("the file's name changed on its way")
sys.stdout.buffer.write(b"out \xff\xfe\n")
sys.stderr.buffer.write(b"\xff\xfe\xfd bad bytes\n")
sys.exit(3)
)");
  auto r = tune_run({"--metric", "acc", "--samples", "2", "--experiment-dir", exp, "--progress", "lines", "--", py(), "bad.py"},
                    45s);
  ASSERT_EQ(r.rc, 1) << "-1: it hung; 134: it aborted\n" << r.out << r.err;
  auto j = summary(r);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["errors"], 2);
  const std::string fffd = "\xEF\xBF\xBD";
  auto all = trials();
  ASSERT_EQ(all.size(), 2u);
  for (auto& t : all) {
    EXPECT_EQ(t.error, "the trial's process ended with exit code 3: " + fffd + fffd + fffd + " bad bytes") << t.id;
    EXPECT_EQ(read_all(exp + "/trials/" + t.id + "/stderr"), "\xff\xfe\xfd bad bytes\n") << "kept as it was written";
  }
  EXPECT_TRUE(contains(r.err, "tune: 2 trials: " + fffd + fffd + fffd + " bad bytes (see ")) << r.err;
  // Every record reads back as JSON (nlohmann's parser refuses text that is not UTF-8).
  for (auto file : {"trials.json", "workdir.json"})
    EXPECT_FALSE(nlohmann::json::parse(read_all(exp + "/" + file), nullptr, false).is_discarded()) << file;
  EXPECT_TRUE(fs::exists(exp + "/results.csv"));
  // tune resume of it finishes (the experiment is over: nothing to run again).
  auto resumed = files.tune({"resume", exp});
  EXPECT_NE(resumed.rc, -1) << "tune resume hung\n" << resumed.err;
  EXPECT_TRUE(summary(resumed).is_object()) << resumed.out << resumed.err;
}


}  // namespace
}  // namespace tune::test
