// The working directory as shipped: the scan's rules (ignored names, .tuneignore,
// links, limits, unreadable files), the manifest read back as a node must, and a
// trial's own copy.
#include "tune/trial/workdir.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tune/trial/sha256.hpp"

namespace tune {
namespace {

namespace fs = std::filesystem;

class Workdir : public ::testing::Test {
 protected:
  fs::path root;
  void SetUp() override {
    char tmpl[] = "/tmp/workdir-test-XXXXXX";
    root = ::mkdtemp(tmpl);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(root, fs::perms::owner_all, ec);
    fs::remove_all(root, ec);
  }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root / "src" / rel).parent_path());
    std::ofstream(root / "src" / rel) << text;
  }
  std::string src() const { return (root / "src").string(); }
  static std::vector<std::string> paths(const workdir_manifest& m) {
    std::vector<std::string> out;
    for (auto& f : m.files) out.push_back(f.path);
    return out;
  }
};

TEST_F(Workdir, TheScanHashesEveryFileAndLeavesOutGitCachesAndIgnoredPatterns) {
  write("train.py", "print('hi')\n");
  write("lib/model.py", "x = 1\n");
  write("lib/__pycache__/model.cpython-311.pyc", "junk");
  write(".git/HEAD", "ref: refs/heads/main\n");
  write("data/big.bin", std::string(1000, 'x'));
  write("notes/a.log", "log");
  write("deep/x/y/z.ckpt", "c");
  write("keep.txt", "k");
  write("tune_results/exp/experiment.db", "db");
  write(".tuneignore", "# comment\n\n*.log\ndata/\n**/*.ckpt\n/keep.txt\n");
  fs::permissions(root / "src/train.py", fs::perms::owner_exec, fs::perm_options::add);
  auto s = scan_workdir(src());
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(paths(s->manifest), (std::vector<std::string>{".tuneignore", "train.py", "lib/model.py"}));  // a folder's files, then its folders'
  EXPECT_EQ(s->ignored, 7);
  for (size_t i = 0; i < s->manifest.files.size(); ++i) {
    auto& f = s->manifest.files[i];
    EXPECT_EQ(f.sha256, *sha256_file(s->sources[i]));
    EXPECT_EQ(f.size, fs::file_size(s->sources[i]));
    EXPECT_EQ(f.executable, f.path == "train.py") << f.path;
  }
  // Folders listed, parents first; an ignored folder is not walked.
  EXPECT_EQ(s->manifest.dirs, (std::vector<std::string>{"deep", "lib", "notes", "deep/x", "deep/x/y"}));
}

TEST_F(Workdir, AnExperimentFolderInsideIsLeftOut) {
  write("train.py", "1");
  write("runs/exp-1/experiment.db", "db");
  auto s = scan_workdir(src(), {.exclude = {src() + "/runs/exp-1"}});
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(paths(s->manifest), std::vector<std::string>{"train.py"});
}

TEST_F(Workdir, ALinkInsideIsKeptAndOneOutsideIsRefusedNamingIt) {
  write("lib/model.py", "x");
  fs::create_symlink("lib/model.py", root / "src/model.py");
  fs::create_symlink(fs::absolute(root / "src/lib"), root / "src/lib2");  // absolute, but inside
  auto s = scan_workdir(src());
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_EQ(s->manifest.links.size(), 2u);
  EXPECT_EQ(s->manifest.links[0].path, "lib2");
  EXPECT_EQ(s->manifest.links[0].target, "lib");  // made relative
  EXPECT_EQ(s->manifest.links[1].target, "lib/model.py");
  fs::create_symlink("/usr/bin/python3", root / "src/python");
  auto out = scan_workdir(src());
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message().find("link python points outside"), std::string::npos) << out.error().message();
  EXPECT_NE(out.error().message().find(".tuneignore"), std::string::npos);
  fs::remove(root / "src/python");
  fs::create_symlink("../../etc", root / "src/lib/up");
  EXPECT_FALSE(scan_workdir(src()));
}

TEST_F(Workdir, AFolderOverTheLimitIsRefusedNamingItsLargestFiles) {
  write("train.py", "1");
  write("data/huge.bin", std::string(3000, 'x'));
  write("data/mid.bin", std::string(2000, 'x'));
  auto s = scan_workdir(src(), {.max_bytes = 4000});
  ASSERT_FALSE(s);
  auto& m = s.error().message();
  EXPECT_NE(m.find("over the limit"), std::string::npos) << m;
  EXPECT_LT(m.find("data/huge.bin"), m.find("data/mid.bin")) << m;
  EXPECT_NE(m.find(".tuneignore"), std::string::npos) << m;
  auto many = scan_workdir(src(), {.max_files = 2});
  ASSERT_FALSE(many);
  EXPECT_NE(many.error().message().find("3 files, over the limit of 2"), std::string::npos) << many.error().message();
}

TEST_F(Workdir, MissingUnreadableAndBadIgnoreFilesAreErrors) {
  auto missing = scan_workdir((root / "nope").string());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("does not exist"), std::string::npos);
  write("a.txt", "a");
  EXPECT_FALSE(scan_workdir(src() + "/a.txt"));  // not a folder
  write(".tuneignore", "!keep.txt\n");
  auto neg = scan_workdir(src());
  ASSERT_FALSE(neg);
  EXPECT_NE(neg.error().message().find(".tuneignore:1"), std::string::npos) << neg.error().message();
  fs::remove(root / "src/.tuneignore");
  if (::geteuid() == 0) GTEST_SKIP() << "root reads every file: the unreadable case cannot be made";
  write("secret.txt", "s");
  fs::permissions(root / "src/secret.txt", fs::perms::none);
  auto unreadable = scan_workdir(src());
  ASSERT_FALSE(unreadable);
  EXPECT_NE(unreadable.error().message().find("secret.txt"), std::string::npos);
}

TEST_F(Workdir, TheManifestReadsBackAndRefusesPathsOutside) {
  write("train.py", "print(1)\n");
  write("pkg/m.py", "m");
  fs::create_symlink("pkg/m.py", root / "src/m.py");
  auto s = scan_workdir(src());
  ASSERT_TRUE(s);
  auto back = workdir_manifest::from_json(s->manifest.to_json());
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->to_json(), s->manifest.to_json());
  std::string sha(64, 'a');
  for (auto bad : {R"({"dirs":["../x"],"files":[],"links":[]})", R"({"dirs":["/etc"],"files":[],"links":[]})",
                   R"({"dirs":["a//b"],"files":[],"links":[]})", R"({"dirs":["a","a"],"files":[],"links":[]})",
                   R"({"dirs":[],"files":[{"path":"x","size":1,"sha256":"zz"}],"links":[]})",
                   R"({"dirs":[],"files":[],"links":[{"path":"l","target":"../../etc/passwd"}]})",
                   R"({"dirs":[],"files":[],"links":[{"path":"l","target":"/etc/passwd"}]})", R"([1,2])", "not json"}) {
    EXPECT_FALSE(workdir_manifest::from_json(bad)) << bad;
  }
  EXPECT_TRUE(workdir_manifest::from_json(R"({"dirs":["a"],"files":[{"path":"a/x","size":1,"sha256":")" + sha +
                                          R"(","x":true}],"links":[{"path":"a/l","target":"../a/x"}]})"));
}

TEST_F(Workdir, ATrialsCopyHasEveryFileModeAndLinkAndChangesStayInIt) {
  write("train.py", "print(1)\n");
  write("pkg/m.py", "m");
  write("empty/.keep", "");
  fs::permissions(root / "src/train.py", fs::perms::owner_exec, fs::perm_options::add);
  fs::create_symlink("pkg/m.py", root / "src/m.py");
  auto s = scan_workdir(src());
  ASSERT_TRUE(s);
  auto blobs = root / "blobs";
  fs::create_directories(blobs);
  for (size_t i = 0; i < s->manifest.files.size(); ++i)
    fs::copy_file(s->sources[i], blobs / s->manifest.files[i].sha256, fs::copy_options::overwrite_existing);
  auto a = (root / "a").string(), b = (root / "b").string();
  ASSERT_TRUE(materialize_workdir(s->manifest, blobs.string(), a));
  ASSERT_TRUE(materialize_workdir(s->manifest, blobs.string(), b));
  EXPECT_EQ(*sha256_file(a + "/train.py"), *sha256_file(src() + "/train.py"));
  EXPECT_EQ(::access((a + "/train.py").c_str(), X_OK), 0);
  EXPECT_NE(::access((a + "/pkg/m.py").c_str(), X_OK), 0);
  EXPECT_TRUE(fs::is_symlink(a + "/m.py"));
  EXPECT_EQ(fs::read_symlink(a + "/m.py"), "pkg/m.py");
  EXPECT_TRUE(fs::exists(a + "/empty/.keep"));
  std::ofstream(a + "/pkg/m.py", std::ios::app) << "changed";
  std::ifstream in(b + "/pkg/m.py");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "m");
  std::ifstream blob(blobs / s->manifest.files[1].sha256);
  EXPECT_EQ(*sha256_file((blobs / s->manifest.files[1].sha256).string()), s->manifest.files[1].sha256);
  EXPECT_FALSE(materialize_workdir(s->manifest, blobs.string(), a)) << "the destination exists";
  fs::remove(blobs / s->manifest.files[0].sha256);
  EXPECT_FALSE(materialize_workdir(s->manifest, blobs.string(), (root / "c").string())) << "a blob is missing";
}

// File systems hold names that are not UTF-8: the manifest keeps them byte for byte
// ({"hex": ...}), so a trial's copy has the very names; its JSON text is UTF-8.
TEST_F(Workdir, NamesThatAreNotUtf8ReachTheTrialsCopyByteForByte) {
  const std::string file = "bad\xffname.txt", dir = "d\xfe\xed\xa0\x80", nested = dir + "/x\xc0\xaf.py", link = "l\xff";
  write(file, "exact");
  write(nested, "n");
  write("ok.py", "o");
  fs::create_symlink(file, root / "src" / link);
  auto s = scan_workdir(src());
  ASSERT_TRUE(s) << s.error().message();
  auto text = s->manifest.to_json();
  EXPECT_EQ(text.find('\xff'), std::string::npos) << "the text is UTF-8";
  EXPECT_NE(text.find(R"({"hex":"626164ff6e616d652e747874"})"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("ok.py")"), std::string::npos) << "a UTF-8 name stays a string: " << text;
  auto back = workdir_manifest::from_json(text);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(paths(*back), paths(s->manifest));
  EXPECT_EQ(back->dirs, std::vector<std::string>{dir});
  ASSERT_EQ(back->links.size(), 1u);
  EXPECT_EQ(back->links[0].path, link);
  EXPECT_EQ(back->links[0].target, file);
  EXPECT_EQ(back->to_json(), text);
  auto blobs = root / "blobs";
  fs::create_directories(blobs);
  for (size_t i = 0; i < s->manifest.files.size(); ++i)
    fs::copy_file(s->sources[i], blobs / s->manifest.files[i].sha256, fs::copy_options::overwrite_existing);
  auto copy = (root / "copy").string();
  ASSERT_TRUE(materialize_workdir(*back, blobs.string(), copy));
  std::ifstream in(copy + "/" + file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "exact");
  EXPECT_TRUE(fs::exists(copy + "/" + nested));
  EXPECT_EQ(fs::read_symlink(copy + "/" + link), file);
  // A hex name that leaves the folder, or is no hex, is refused as any other.
  for (auto bad : {R"({"dirs":[{"hex":"2e2e2f78"}],"files":[],"links":[]})", R"({"dirs":[{"hex":"zz"}],"files":[],"links":[]})",
                   R"({"dirs":[],"files":[],"links":[{"path":"l","target":{"hex":"2f657463"}}]})"})
    EXPECT_FALSE(workdir_manifest::from_json(bad)) << bad;
}

TEST(IgnoreRules, PatternsMatchAsInGitignore) {
  auto r = ignore_rules::parse("*.pyc\nbuild/\n/top.txt\ndocs/*.md\n**/cache/**\n", "t");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->ignored("a/b/x.pyc", false));
  EXPECT_TRUE(r->ignored(".hidden.pyc", false));
  EXPECT_TRUE(r->ignored("build", true));
  EXPECT_FALSE(r->ignored("build", false));  // a file named build stays
  EXPECT_TRUE(r->ignored("top.txt", false));
  EXPECT_FALSE(r->ignored("sub/top.txt", false));
  EXPECT_TRUE(r->ignored("docs/a.md", false));
  EXPECT_FALSE(r->ignored("docs/sub/a.md", false));
  EXPECT_TRUE(r->ignored("x/cache/y", false));
  EXPECT_FALSE(r->ignored("train.py", false));
}

}  // namespace
}  // namespace tune
