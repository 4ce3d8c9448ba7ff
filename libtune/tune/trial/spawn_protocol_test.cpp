// The process protocol's frames (PROTOCOL.md), frame by frame: the bytes the spec
// describes, built here from its terms, are what the C++ side (spawn_protocol.hpp) and
// the Python spawner (python_spawner.py, through spawn_protocol_test.py) write and what
// both read back; a malformed request is refused by both.
#include "tune/trial/spawn_protocol.hpp"

#include "tune/trial/python_module.hpp"

#include "harness.hpp"

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tune {
namespace {

namespace sp = spawn_protocol;
using nlohmann::json;

constexpr const char* python = "/usr/bin/python3";

// --- the spec's terms ----------------------------------------------------------------

std::string word(int32_t v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}

std::string field(const std::string& s) { return word(static_cast<int32_t>(s.size())) + s; }

std::string body(const std::vector<std::string>& fields) {
  std::string b;
  for (auto& f : fields) b += field(f);
  return b;
}

std::string hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string h;
  for (unsigned char c : bytes) h += digits[c >> 4], h += digits[c & 15];
  return h;
}

std::string unhex(const std::string& h) {
  std::string bytes;
  for (size_t i = 0; i + 1 < h.size(); i += 2) bytes += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return bytes;
}

// A process_spec as one line, to compare and to show.
std::string describe(const process_spec& s) {
  json j;
  auto h = [](const std::vector<std::string>& v) {
    std::vector<std::string> out;
    for (auto& x : v) out.push_back(hex(x));
    return out;
  };
  j["argv"] = h(s.argv);
  for (auto& [k, v] : s.env) j["env"][hex(k)] = hex(v);
  j["cwd"] = hex(s.cwd), j["into"] = hex(s.contain.into), j["join"] = h(s.contain.join), j["kill"] = hex(s.contain.kill);
  j["subreaper"] = s.contain.subreaper, j["uid"] = s.run_as.uid, j["gid"] = s.run_as.gid, j["groups"] = s.run_as.groups;
  return j.dump();
}

// What the Python side decoded, as a process_spec's description; its refusal as it is.
std::string describe(const json& decoded) {
  if (!decoded.contains("argv")) return decoded.dump();
  process_spec s;
  for (auto& a : decoded["argv"]) s.argv.push_back(unhex(a));
  for (auto& kv : decoded["env"]) s.env[unhex(kv[0])] = unhex(kv[1]);
  s.cwd = unhex(decoded["cwd"]), s.contain.into = unhex(decoded["into"]), s.contain.kill = unhex(decoded["kill"]);
  for (auto& j : decoded["join"]) s.contain.join.push_back(unhex(j));
  s.contain.subreaper = decoded["subreaper"];
  s.run_as.uid = decoded["uid"], s.run_as.gid = decoded["gid"];
  s.run_as.groups = decoded["groups"].get<std::vector<uint32_t>>();
  return describe(s);
}

// --- the table ---------------------------------------------------------------------

struct request_case {
  std::string name;
  process_spec spec;
  std::vector<std::string> fields;  // the body's fields, in PROTOCOL.md's order
};

std::vector<request_case> requests() {
  process_spec full;
  full.argv = {"/usr/bin/python3", "train.py", "--lr=0.1", "", "two words", "caf\xc3\xa9", "not utf-8 \xff\xfe"};
  full.env = {{"A", "1"}, {"EMPTY", ""}, {"PATH", "/usr/bin:/bin"}, {"RAW", "\x80\x81"}, {"WITH=SIGN", "x=y"}};
  full.cwd = "/srv/trials/t 1";
  full.contain.into = "/sys/fs/cgroup/tune/t1";
  full.contain.join = {"/sys/fs/cgroup/cpu/tune/t1/cgroup.procs", "/sys/fs/cgroup/memory/tune/t1/cgroup.procs"};
  full.contain.kill = "/sys/fs/cgroup/tune/t1/cgroup.kill";
  full.contain.subreaper = true;
  full.run_as = {1000, 1001, {27, 100, 4294967295u}};
  process_spec wide;
  wide.argv = {"/bin/sh", "-c", std::string(70000, 'x')};  // a field past 16 bits
  wide.run_as = {INT64_MAX, INT64_MIN, {0}};
  return {
      {"the least: a program", {{"/bin/true"}, {}, ""}, {"1", "/bin/true", "0", "", "", "0", "", "0", "-1", "-1", "0"}},
      {"every field",
       full,
       {"7", "/usr/bin/python3", "train.py", "--lr=0.1", "", "two words", "caf\xc3\xa9", "not utf-8 \xff\xfe",
        "5", "A", "1", "EMPTY", "", "PATH", "/usr/bin:/bin", "RAW", "\x80\x81", "WITH=SIGN", "x=y",
        "/srv/trials/t 1", "/sys/fs/cgroup/tune/t1",
        "2", "/sys/fs/cgroup/cpu/tune/t1/cgroup.procs", "/sys/fs/cgroup/memory/tune/t1/cgroup.procs",
        "/sys/fs/cgroup/tune/t1/cgroup.kill", "1", "1000", "1001", "3", "27", "100", "4294967295"}},
      {"long fields and extreme ids",
       wide,
       {"3", "/bin/sh", "-c", std::string(70000, 'x'), "0", "", "", "0", "", "0", "9223372036854775807",
        "-9223372036854775808", "1", "0"}},
  };
}

// Bodies every decoder refuses (the spawner answers EINVAL).
std::vector<std::pair<std::string, std::string>> malformed() {
  const std::vector<std::string> least{"1", "/bin/true", "0", "", "", "0", "", "0", "-1", "-1", "0"};
  auto with = [&](size_t at, const std::string& v) {
    auto f = least;
    f[at] = v;
    return body(f);
  };
  std::string whole = body(least);
  return {
      {"an empty body", ""},
      {"no program", body({"0", "0", "", "", "0", "", "0", "-1", "-1", "0"})},
      {"a length cut short", whole.substr(0, 2)},
      {"a field running past the body", whole.substr(0, whole.size() - 1)},
      {"bytes after the last group", whole + "x"},
      {"a count promising more fields than follow", with(0, "2")},
      {"a group count promising more than follow", with(10, "1")},
      {"the fields stopping after the uid", body({"1", "/bin/true", "0", "", "", "0", "", "0", "-1"})},
      // Numbers are ASCII digits (a uid or gid may start with '-') within their type: not
      // what strtoul or Python's int() would also take.
      {"a count that is not a number", with(2, "x")},
      {"a count with bytes after its digits", with(2, "0x")},
      {"a negative count", with(2, "-1")},
      {"a count with a sign", with(2, "+0")},
      {"a count with a space", with(2, " 0")},
      {"a count with an underscore", with(2, "0_0")},
      {"an empty count", with(2, "")},
      {"a uid that is not a number", with(8, "abc")},
      {"an empty uid", with(8, "")},
      {"a uid past 64 bits", with(8, "9223372036854775808")},
      {"a gid in exponent form", with(9, "1e3")},
      {"a negative group", body({"1", "/bin/true", "0", "", "", "0", "", "0", "-1", "-1", "1", "-1"})},
      {"a group past 32 bits", body({"1", "/bin/true", "0", "", "", "0", "", "0", "-1", "-1", "1", "4294967296"})},
      {"a group in other digits", body({"1", "/bin/true", "0", "", "", "0", "", "0", "-1", "-1", "1", "\xd9\xa1"})},
  };
}

// --- the Python side ---------------------------------------------------------------

class SpawnProtocol : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(python, X_OK) != 0) GTEST_SKIP() << "no " << python << ": the Python side cannot be checked";
    dir_ = std::filesystem::temp_directory_path() / ("spawn_protocol_test." + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "spawner.py") << python_spawner_source();  // what a node installs
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  // Runs spawn_protocol_test.py on `cases` (and the socket `fd`, left open there); what
  // it printed.
  json run_python(const json& cases, int fd = -1) {
    std::ofstream(dir_ / "cases.json") << cases.dump();
    std::vector<std::string> argv{python, LIBTUNE_SPAWN_PROTOCOL_DRIVER, (dir_ / "spawner.py").string(),
                                  (dir_ / "cases.json").string()};
    if (fd >= 0) argv.push_back(std::to_string(fd));
    auto r = test::run(argv);
    EXPECT_EQ(r.rc, 0) << r.err;
    auto out = json::parse(r.out, nullptr, false);
    EXPECT_TRUE(out.is_object()) << r.out << r.err;
    return out.is_object() ? out : json::object();
  }
  std::filesystem::path dir_;
};

TEST(SpawnProtocolCpp, TheNodeWritesEveryRequestAsTheSpecSays) {
  for (auto& c : requests()) {
    std::string b = body(c.fields);
    EXPECT_EQ(hex(sp::encode_request(c.spec)), hex(word(static_cast<int32_t>(b.size())) + b)) << c.name;
    auto back = sp::decode_request(b);
    ASSERT_TRUE(back) << c.name;
    EXPECT_EQ(describe(*back), describe(c.spec)) << c.name;
  }
}

TEST_F(SpawnProtocol, BothSpawnersReadEveryRequestAsTheNodeMeantIt) {
  json cases{{"requests", json::array()}};
  for (auto& c : requests()) cases["requests"].push_back(hex(body(c.fields)));
  auto out = run_python(cases);
  auto table = requests();
  ASSERT_EQ(out["requests"].size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) EXPECT_EQ(describe(out["requests"][i]), describe(table[i].spec)) << table[i].name;
}

TEST_F(SpawnProtocol, BothSpawnersRefuseTheSameMalformedRequests) {
  json cases{{"requests", json::array()}};
  for (auto& [name, b] : malformed()) cases["requests"].push_back(hex(b));
  auto out = run_python(cases);
  auto table = malformed();
  ASSERT_EQ(out["requests"].size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    auto& [name, b] = table[i];
    EXPECT_FALSE(sp::decode_request(b)) << "C++ took " << name;
    EXPECT_TRUE(out["requests"][i].contains("rejected")) << "Python: " << name << ": " << out["requests"][i].dump();
  }
}

TEST_F(SpawnProtocol, WordsAndAnswersAreTheSameBytesFromEitherSide) {
  const std::vector<int32_t> words{0, 1, -1, 127, -EIO, 3 << 8 /* exit code 3 */, 9 /* SIGKILL */, INT32_MIN, INT32_MAX};
  const std::vector<sp::spawn_answer> answers{{4242, 0}, {0, EINVAL}, {0, EAGAIN}, {INT32_MAX, 0}};
  json cases{{"words", words}, {"answers", json::array()}};
  for (auto& a : answers) cases["answers"].push_back({a.keeper, a.error});
  auto out = run_python(cases);
  ASSERT_EQ(out["words"].size(), words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    auto b = sp::encode_word(words[i]);
    EXPECT_EQ(hex({b.begin(), b.end()}), hex(word(words[i])));
    EXPECT_EQ(sp::decode_word(b), words[i]);
    EXPECT_EQ(out["words"][i], hex(word(words[i]))) << "Python's word " << words[i];
  }
  ASSERT_EQ(out["answers"].size(), answers.size());
  for (size_t i = 0; i < answers.size(); ++i) {
    auto golden = word(answers[i].keeper) + word(answers[i].error);
    auto b = sp::encode_answer(answers[i]);
    EXPECT_EQ(hex({b.begin(), b.end()}), hex(golden));
    EXPECT_EQ(sp::decode_answer(b), answers[i]);
    EXPECT_EQ(out["answers"][i], hex(golden)) << "Python's answer " << answers[i].keeper << ", " << answers[i].error;
  }
}

// Reads what a passed pipe holds (its channel's name, written by the other side).
std::string drain(int fd) {
  std::string s;
  char buf[64];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return s;
}

void expect_named_pipes(const sp::received_answer& got) {
  ASSERT_EQ(got.passed, 5);
  EXPECT_EQ(drain(got.ends.out), "out");
  EXPECT_EQ(drain(got.ends.err), "err");
  EXPECT_EQ(drain(got.ends.report), "report");
  EXPECT_EQ(drain(got.ends.fail), "fail");
  EXPECT_EQ(drain(got.ends.news), "news");
}

TEST_F(SpawnProtocol, OnTheChannelThePythonSpawnerReadsTheNodesRequestsAndPassesThePipesInOrder) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ::fcntl(sv[0], F_SETFD, FD_CLOEXEC);  // the node's end; sv[1] goes to Python
  auto table = requests();
  for (auto& c : table) ASSERT_TRUE(sp::send_request(sv[0], c.spec)) << c.name;
  ::shutdown(sv[0], SHUT_WR);  // the node is done: read_request's end
  json cases{{"answer_on_socket", {{777, 0, true}, {0, EINVAL, false}}}};
  auto out = run_python(cases, sv[1]);
  ::close(sv[1]);
  ASSERT_EQ(out["socket_requests"].size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) EXPECT_EQ(describe(out["socket_requests"][i]), describe(table[i].spec)) << table[i].name;
  auto started = sp::receive_answer(sv[0]);
  ASSERT_TRUE(started) << started.error().message();
  EXPECT_EQ(started->answer, (sp::spawn_answer{777, 0}));
  expect_named_pipes(*started);
  auto refused = sp::receive_answer(sv[0]);
  ASSERT_TRUE(refused) << refused.error().message();
  EXPECT_EQ(refused->answer, (sp::spawn_answer{0, EINVAL}));
  EXPECT_EQ(refused->passed, 0);
  auto gone = sp::receive_answer(sv[0]);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().message(), "it closed its channel");
  ::close(sv[0]);
}

TEST(SpawnProtocolCpp, OnTheChannelTheCppSpawnerReadsTheNodesRequestsAndPassesThePipesInOrder) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  for (auto& c : requests()) {
    ASSERT_TRUE(sp::send_request(sv[0], c.spec));
    auto got = sp::read_request(sv[1]);
    ASSERT_TRUE(got) << c.name;
    EXPECT_EQ(*got, body(c.fields)) << c.name;
  }
  channels ends;
  int* mine[] = {&ends.out, &ends.err, &ends.report, &ends.fail, &ends.news};
  const char* names[] = {"out", "err", "report", "fail", "news"};
  for (size_t i = 0; i < 5; ++i) {
    int p[2];
    ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
    ASSERT_TRUE(write_all(p[1], names[i], std::strlen(names[i])));
    ::close(p[1]);
    *mine[i] = p[0];
  }
  ASSERT_TRUE(sp::send_answer(sv[1], {777, 0}, &ends));
  for (int* fd : mine) ::close(*fd);
  ASSERT_TRUE(sp::send_answer(sv[1], {0, EINVAL}, nullptr));
  ::close(sv[1]);
  auto started = sp::receive_answer(sv[0]);
  ASSERT_TRUE(started);
  EXPECT_EQ(started->answer, (sp::spawn_answer{777, 0}));
  expect_named_pipes(*started);
  auto refused = sp::receive_answer(sv[0]);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->answer, (sp::spawn_answer{0, EINVAL}));
  EXPECT_EQ(refused->passed, 0);
  EXPECT_FALSE(sp::read_request(sv[0])) << "the end of the channel ends a spawner's wait";
  ::close(sv[0]);
}

}  // namespace
}  // namespace tune
