// Linked into every test program: each test process gets a machine-wide folder of its
// own (TUNE_SHARED_DIR, tune/host/card_claims.hpp), so that a head one test starts is not
// joined by another test's `tune run` (tests run two at a time), and card claims of one
// test's nodes are not another's. A test of that sharing sets the variable itself.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

struct isolated_shared_dir {
  std::string dir;
  isolated_shared_dir() {
    if (const char* d = std::getenv("TUNE_SHARED_DIR"); d && *d) return;
    dir = "/tmp/tune-test-shared-" + std::to_string(::getpid());
    ::setenv("TUNE_SHARED_DIR", dir.c_str(), 1);
  }
  ~isolated_shared_dir() {
    if (dir.empty() || ::getpid() != std::stoi(dir.substr(dir.rfind('-') + 1))) return;  // not in a forked child
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
} isolated;

}  // namespace
