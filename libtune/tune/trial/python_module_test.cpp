// The trials' Python package as nodes write it: every file of python/libtune/, the same
// bytes, and nothing an older version left.
#include "tune/trial/python_module.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace tune {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PythonModule, EveryFileOfThePackageIsBuiltInAsItIs) {
  fs::path package = fs::path(LIBTUNE_PYTHON_PACKAGE_DIR);
  std::set<std::string> in_tree;
  for (auto& e : fs::recursive_directory_iterator(package))
    if (e.is_regular_file() && e.path().extension() == ".py" && e.path().string().find("__pycache__") == std::string::npos)
      in_tree.insert(fs::relative(e.path(), package).string());
  std::set<std::string> built_in;
  for (const auto& f : python_module_files()) {
    built_in.insert(f.path);
    EXPECT_EQ(f.text, read(package / f.path)) << f.path << " differs from the source tree's: rebuild";
  }
  EXPECT_EQ(built_in, in_tree);
  EXPECT_TRUE(built_in.count("__init__.py"));
}

TEST(PythonModule, InstallWritesThePackageAndRemovesWhatAnOlderVersionLeft) {
  char tmpl[] = "/tmp/python-module-XXXXXX";
  fs::path dir = ::mkdtemp(tmpl);
  fs::create_directories(dir / "libtune" / "old");
  std::ofstream(dir / "libtune" / "old" / "gone.py") << "raise ImportError('an older version')\n";
  std::ofstream(dir / "libtune" / "notes.txt") << "not a module\n";
  auto installed = install_python_module(dir.string());
  ASSERT_TRUE(installed) << installed.error().message();
  EXPECT_EQ(*installed, dir.string());
  for (const auto& f : python_module_files()) EXPECT_EQ(read(dir / "libtune" / f.path), f.text) << f.path;
  EXPECT_FALSE(fs::exists(dir / "libtune" / "old" / "gone.py"));
  EXPECT_TRUE(fs::exists(dir / "libtune" / "notes.txt")) << "only .py files are ours to remove";
  EXPECT_TRUE(fs::exists(dir / "_libtune_spawner.py"));
  // Installed again over itself: the same files, no error.
  ASSERT_TRUE(install_python_module(dir.string()));
  for (const auto& f : python_module_files()) EXPECT_EQ(read(dir / "libtune" / f.path), f.text) << f.path;
  fs::remove_all(dir);
}

TEST(PythonModule, AFolderThatCannotBeWrittenIsAnError) {
  auto installed = install_python_module("/proc/libtune-cannot-be-here");
  ASSERT_FALSE(installed);
  EXPECT_NE(installed.error().message().find("/proc/libtune-cannot-be-here"), std::string::npos)
      << installed.error().message();
}

}  // namespace
}  // namespace tune
