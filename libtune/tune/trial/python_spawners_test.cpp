// Python trials started by forking a warm interpreter (python_spawners.hpp): the
// worker sees what a freshly exec'd interpreter would (environment, argv, folder,
// sys.path, signals, fresh randomness), ends the same way (exit codes, tracebacks,
// signals), leaves nothing behind, shows its own command line, and what a warm
// interpreter cannot stand in for is exec'd as always. Needs /usr/bin/python3.
#include "tune/trial/python_spawners.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.hpp"
#include "tune/trial/python_module.hpp"

namespace tune {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Debian's python3, or $WARM_PYTHON (another version to check the warm interpreter against).
const char* python = std::getenv("WARM_PYTHON") && *std::getenv("WARM_PYTHON") ? std::getenv("WARM_PYTHON") : "/usr/bin/python3";

class WarmPython : public ::testing::Test {
 protected:
  fs::path dir;
  std::unique_ptr<python_spawners> pythons;
  std::map<std::string, std::string> base{{"PATH", "/usr/bin:/bin"}, {"HOME", "/tmp"}, {"LANG", "C.UTF-8"}};

  void SetUp() override {
    if (::access(python, X_OK) != 0) GTEST_SKIP() << "no " << python;
    char tmpl[] = "/tmp/warm-python-XXXXXX";
    dir = ::mkdtemp(tmpl);
    auto installed = install_python_module((dir / "python").string());
    ASSERT_TRUE(installed) << installed.error().message();
    pythons = std::make_unique<python_spawners>(*installed, base);
  }
  void TearDown() override {
    pythons.reset();
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }

  std::string script(const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  }

  // Starts argv (argv[0] the interpreter) warm; the worker.
  std::unique_ptr<worker_process> start(std::vector<std::string> argv, std::map<std::string, std::string> extra = {}) {
    auto env = base;
    env["PYTHONPATH"] = (dir / "python").string();
    for (auto& [k, v] : extra) env[k] = v;
    auto warm = pythons->for_program(argv[0]);
    EXPECT_TRUE(warm) << "no warm interpreter for " << argv[0];
    auto p = worker_process::start({argv, env, dir.string()}, warm.get());
    EXPECT_TRUE(p) << p.error().message();
    return p ? std::move(p).value() : nullptr;
  }

  static nlohmann::json report_json(const std::vector<std::string>& reports) {
    return reports.empty() ? nlohmann::json() : nlohmann::json::parse(reports.back(), nullptr, false);
  }
};

const char* inspect_script = R"(
import json, os, random, signal, sys
print("to stdout")
seen = {"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ), "path0": sys.path[0], "path": sys.path,
        "random": random.random(), "main": __name__, "file": __file__, "runpy": "runpy" in sys.modules,
        "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        "sigpipe": signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN,
        "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0),
        "cmdline": open("/proc/self/cmdline", "rb").read().rstrip(b"\0").split(b"\0"),
        "comm": open("/proc/self/comm").read().strip(), "fds": sorted(int(f) for f in os.listdir("/proc/self/fd"))}
seen["cmdline"] = [a.decode() for a in seen["cmdline"]]
os.write(3, (json.dumps(seen) + "\n").encode())
)";

TEST_F(WarmPython, AWorkerSeesWhatAFreshInterpreterWould) {
  auto path = script("probe.py", inspect_script);
  auto p = start({python, path, "--lr", "0.1"}, {{"TUNE_TRIAL_ID", "t1"}, {"MY_EXTRA", "x"}});
  ASSERT_TRUE(p);
  std::vector<std::string> reports;
  auto e = p->wait(10s, reports);
  ASSERT_TRUE(e && e->ok()) << p->stderr_tail();
  auto seen = report_json(reports);
  ASSERT_TRUE(seen.is_object()) << p->stderr_tail();
  EXPECT_FALSE(seen["runpy"] == false) << "not warm: it was exec'd";
  EXPECT_EQ(seen["argv"], nlohmann::json({path, "--lr", "0.1"}));
  EXPECT_EQ(seen["cwd"], dir.string());
  EXPECT_EQ(seen["main"], "__main__");
  EXPECT_EQ(seen["file"], path);
  EXPECT_EQ(seen["path0"], dir.string()) << "the script's folder first, as python3 script.py";
  EXPECT_EQ(seen["path"][1], (dir / "python").string()) << "then PYTHONPATH";
  std::map<std::string, std::string> want = base;
  want["PYTHONPATH"] = (dir / "python").string();
  want["TUNE_TRIAL_ID"] = "t1";
  want["MY_EXTRA"] = "x";
  using env_map = std::map<std::string, std::string>;
  EXPECT_EQ(seen["env"].get<env_map>(), want) << "exactly the environment it is given";
  EXPECT_TRUE(seen["sigterm"] && seen["sigint"] && seen["sigpipe"]) << seen;
  EXPECT_TRUE(seen["mask"].empty()) << seen["mask"];
  EXPECT_EQ(seen["pid"], p->pid());
  EXPECT_EQ(seen["ppid"], p->group()) << "its keeper is its parent";
  EXPECT_EQ(seen["pgid"], p->group());
  EXPECT_EQ(seen["cmdline"], nlohmann::json({python, path, "--lr", "0.1"})) << "ps shows the trial's command";
  EXPECT_EQ(seen["comm"], "probe.py");
  EXPECT_EQ(p->stdout_tail(), "to stdout\n");
  // The same open descriptors as the same script exec'd (0-3, and listdir's own).
  auto fresh = start({python, path}, {{"LIBTUNE_FRESH_PYTHON", "1"}});
  std::vector<std::string> fresh_reports;
  ASSERT_TRUE(fresh->wait(10s, fresh_reports));
  EXPECT_EQ(report_json(fresh_reports)["runpy"], false);
  EXPECT_EQ(seen["fds"], report_json(fresh_reports)["fds"]) << "nothing of the spawner's is open";
  // Two workers draw different random numbers: the warm interpreter's state is not theirs.
  auto q = start({python, path});
  std::vector<std::string> more;
  ASSERT_TRUE(q->wait(10s, more));
  EXPECT_NE(report_json(more)["random"], seen["random"]);
}

TEST_F(WarmPython, EndsAsAFreshInterpreterWould) {
  auto raise = script("raise.py", "import sys\ndef f():\n    return 1 / 0\nf()\n");
  auto p = start({python, raise});
  std::vector<std::string> r;
  auto e = p->wait(10s, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->describe(), "exit code 1");
  auto& err = p->stderr_tail();
  EXPECT_NE(err.find("Traceback (most recent call last):"), std::string::npos) << err;
  EXPECT_NE(err.find("ZeroDivisionError: division by zero"), std::string::npos) << err;
  EXPECT_EQ(err.find("_libtune_spawner"), std::string::npos) << "the spawner's frames are not the script's: " << err;
  auto code = start({python, script("exit.py", "import sys\nsys.exit(3)\n")});
  ASSERT_EQ(code->wait(10s, r)->describe(), "exit code 3");
  auto text = start({python, script("text.py", "import sys\nsys.exit('bad config')\n")});
  EXPECT_EQ(text->wait(10s, r)->describe(), "exit code 1");
  EXPECT_NE(text->stderr_tail().find("bad config"), std::string::npos);
  auto syntax = start({python, script("syntax.py", "def f(:\n  pass\n")});
  EXPECT_EQ(syntax->wait(10s, r)->describe(), "exit code 1");
  EXPECT_NE(syntax->stderr_tail().find("SyntaxError"), std::string::npos) << syntax->stderr_tail();
  auto missing = start({python, (dir / "nope.py").string()});
  EXPECT_EQ(missing->wait(10s, r)->describe(), "exit code 2");
  EXPECT_NE(missing->stderr_tail().find("can't open file"), std::string::npos);
  auto atexit = start({python, script("atexit.py", "import atexit, os\natexit.register(lambda: os.write(3, b'bye\\n'))\n")});
  ASSERT_TRUE(atexit->wait(10s, r)->ok());
  EXPECT_EQ(r.back(), "bye") << "atexit handlers run, as at a normal exit";
}

TEST_F(WarmPython, StopKillAndNoOrphans) {
  auto sleeper = script("sleep.py", "import os, subprocess, time\nsubprocess.Popen(['sleep', '60'])\nos.write(3, b'up\\n')\ntime.sleep(60)\n");
  auto p = start({python, sleeper});
  std::vector<std::string> r;
  auto until = std::chrono::steady_clock::now() + 10s;
  while (r.empty() && std::chrono::steady_clock::now() < until) p->poll(20ms, r);
  ASSERT_FALSE(r.empty()) << p->stderr_tail();
  int group = p->group();
  p->terminate();  // SIGTERM: a script that never imported libtune dies of it
  auto e = p->wait(10s, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->describe(), "killed by signal 15 (Terminated)");
  EXPECT_TRUE(test::wait_until([&] { return ::kill(-group, 0) != 0; }, 5s)) << "its child outlived it";
}

TEST_F(WarmPython, ModulesRunWithDashM) {
  fs::create_directories(dir / "pkg");
  std::ofstream(dir / "pkg/__init__.py") << "";
  std::ofstream(dir / "pkg/__main__.py") << "import os, sys\nos.write(3, (__name__ + ' ' + ' '.join(sys.argv[1:]) + '\\n').encode())\n";
  auto p = start({python, "-m", "pkg", "a", "b"});
  std::vector<std::string> r;
  ASSERT_TRUE(p->wait(10s, r)->ok()) << p->stderr_tail();
  EXPECT_EQ(r, std::vector<std::string>{"__main__ a b"});
  // Its exception keeps the module's frames (the trial's error and its traceback).
  std::ofstream(dir / "pkg/boom.py") << "def f():\n    raise ValueError('lr 3 diverged')\nf()\n";
  auto boom = start({python, "-m", "pkg.boom"});
  ASSERT_EQ(boom->wait(10s, r)->describe(), "exit code 1");
  auto& err = boom->stderr_tail();
  EXPECT_NE(err.find("Traceback (most recent call last):"), std::string::npos) << err;
  EXPECT_NE(err.find("in f\n"), std::string::npos) << err;
  EXPECT_NE(err.find("ValueError: lr 3 diverged"), std::string::npos) << err;
  EXPECT_EQ(err.find("_libtune_spawner"), std::string::npos) << err;
  EXPECT_EQ(err.find("runpy"), std::string::npos) << err;
}

TEST_F(WarmPython, WhatAWarmInterpreterCannotStandInForIsExecd) {
  auto path = script("probe.py", inspect_script);
  // A HOME with a user site-packages folder: a fresh interpreter puts it on sys.path.
  std::string version;
  if (FILE* f = ::popen((std::string{python} + " -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'").c_str(), "r")) {
    char buf[32] = {};
    if (std::fgets(buf, sizeof buf, f)) version = buf;
    ::pclose(f);
  }
  while (!version.empty() && (version.back() == '\n' || version.back() == ' ')) version.pop_back();
  ASSERT_FALSE(version.empty());
  auto with_site = dir / "home-with-site";
  fs::create_directories(with_site / ".local/lib" / ("python" + version) / "site-packages");
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add);
  for (auto env : std::vector<std::map<std::string, std::string>>{{{"PYTHONHASHSEED", "1"}},
                                                                  {{"LD_PRELOAD", ""}},
                                                                  {{"LIBTUNE_FRESH_PYTHON", "1"}},
                                                                  {{"HOME", with_site.string()}}}) {
    auto p = start({python, path}, env);
    std::vector<std::string> r;
    ASSERT_TRUE(p->wait(10s, r)->ok()) << p->stderr_tail();
    EXPECT_EQ(report_json(r)["runpy"], false) << env.begin()->first << ": should have been exec'd";
  }
  // Another HOME without one (a trial's own folder): the same start, run warm.
  auto plain = dir / "plain-home";
  fs::create_directories(plain);
  auto home = start({python, path}, {{"HOME", plain.string()}});
  std::vector<std::string> hr;
  ASSERT_TRUE(home->wait(10s, hr)->ok()) << home->stderr_tail();
  EXPECT_EQ(report_json(hr)["runpy"], true) << "a HOME without user site-packages: run warm";
  auto options = start({python, "-S", path});
  std::vector<std::string> r;
  ASSERT_TRUE(options->wait(10s, r)->ok());
  EXPECT_EQ(report_json(r)["runpy"], false) << "interpreter options: exec'd";
  EXPECT_FALSE(python_spawners::is_python("/bin/sh"));
  EXPECT_FALSE(pythons->for_program("/bin/sh"));
}

TEST_F(WarmPython, AWarmInterpreterThatDiesIsStartedAgainAndStartsMeanwhileStillWork) {
  auto path = script("ok.py", "import os\nos.write(3, b'ok\\n')\n");
  auto first = pythons->for_program(python);
  ASSERT_TRUE(first);
  ::kill(first->pid(), SIGKILL);
  std::vector<std::string> r;
  // The dead one: the start falls back to exec'ing the command.
  auto env = base;
  auto p = worker_process::start({{python, path}, env, dir.string()}, first.get());
  ASSERT_TRUE(p) << p.error().message();
  ASSERT_TRUE((*p)->wait(10s, r)->ok());
  EXPECT_EQ(r, std::vector<std::string>{"ok"});
  auto again = pythons->for_program(python);
  ASSERT_TRUE(again);
  EXPECT_NE(again->pid(), first->pid()) << "a new one";
}

}  // namespace
}  // namespace tune

namespace tune {
namespace {

TEST_F(WarmPython, NothingOutlivesItsNodeAndLibtuneWorksAsInAFreshOne) {
  // A script that imports libtune: its stop handler comes with the import, as always.
  auto stop = script("stop.py", "import os, time, libtune\nos.write(3, b'up\\n')\ntime.sleep(60)\n");
  auto p = start({python, stop}, {{"TUNE_TRIAL_ID", "t1"}});
  std::vector<std::string> r;
  auto until = std::chrono::steady_clock::now() + 10s;
  while (r.empty() && std::chrono::steady_clock::now() < until) p->poll(20ms, r);
  ASSERT_FALSE(r.empty()) << p->stderr_tail();
  p->terminate();
  auto e = p->wait(10s, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->describe(), "exit code 143") << "libtune's SystemExit(143), not the signal";
  // The node goes (its warm interpreters' channels close): their workers go with it.
  auto q = start({python, script("long.py", "import os, time\nos.write(3, b'up\\n')\ntime.sleep(60)\n")});
  std::vector<std::string> up;
  until = std::chrono::steady_clock::now() + 10s;
  while (up.empty() && std::chrono::steady_clock::now() < until) q->poll(20ms, up);
  ASSERT_FALSE(up.empty());
  int worker = q->pid();
  pythons.reset();
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(worker); }, 5s)) << "a worker outlived its node";
}

}  // namespace
}  // namespace tune

namespace tune {
namespace {

TEST_F(WarmPython, ItsExitDoesWhatTheInterpretersDoes) {
  // Unclosed files flushed, non-daemon threads waited for, atexit run after them,
  // sys.exit's codes and texts.
  auto path = script("ends.py", R"(
import atexit, os, sys, threading, time
f = open(os.path.join(os.path.dirname(__file__), "unclosed.txt"), "w")
f.write("kept")
def late():
    time.sleep(0.3)
    with open(os.path.join(os.path.dirname(__file__), "thread.txt"), "w") as g:
        g.write("done")
threading.Thread(target=late).start()
atexit.register(lambda: os.write(3, (open(os.path.join(os.path.dirname(__file__), "thread.txt")).read() + "\n").encode()))
sys.stdout.write("no newline")
sys.exit(int(os.environ.get("CODE", "0")) if os.environ.get("CODE", "0").isdigit() else os.environ["CODE"])
)");
  std::vector<std::string> r;
  auto p = start({python, path});
  auto e = p->wait(10s, r);
  ASSERT_TRUE(e && e->ok()) << p->stderr_tail();
  EXPECT_EQ(r, std::vector<std::string>{"done"}) << "the thread first, then atexit";
  std::ifstream in(dir / "unclosed.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "kept") << "an unclosed file is flushed";
  EXPECT_EQ(p->stdout_tail(), "no newline");
  auto code = start({python, path}, {{"CODE", "7"}});
  EXPECT_EQ(code->wait(10s, r)->describe(), "exit code 7");
  auto text = start({python, path}, {{"CODE", "bad input"}});
  EXPECT_EQ(text->wait(10s, r)->describe(), "exit code 1");
  EXPECT_NE(text->stderr_tail().find("bad input"), std::string::npos);
}

}  // namespace
}  // namespace tune
