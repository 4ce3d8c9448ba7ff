#include "tune/cluster/token.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace tune {

std::string default_token_file() {
  if (const char* env = std::getenv("TUNE_TOKEN_FILE"); env && *env) return env;
  const char* home = std::getenv("HOME");
  return std::string{home && *home ? home : "/tmp"} + "/.tune/token";
}

namespace {

bool valid_token(std::string_view t) {
  if (t.size() < 16 || t.size() > 256) return false;
  for (char c : t)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

status make_parent(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return status::ok();
  std::string dir = path.substr(0, slash);
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) return status::ok();
  if (auto parent = make_parent(dir); !parent) return parent;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return {errc::invalid_argument, "cannot create " + dir + ": " + std::strerror(errno)};
  return status::ok();
}

}  // namespace

expected<token_file> read_token(const std::string& path) {
  std::ifstream in{path};
  if (!in) {
    if (errno == ENOENT)
      return status{errc::not_found, "no token file at " + path +
                                         ": copy the head's token file here (the head creates it "
                                         "on `tune start --head`), or give --token-file"};
    return status{errc::invalid_argument, "cannot read the token file " + path + ": " + std::strerror(errno)};
  }
  token_file out;
  std::getline(in, out.token);
  while (!out.token.empty() && (out.token.back() == '\r' || out.token.back() == ' ')) out.token.pop_back();
  if (!valid_token(out.token))
    return status{errc::invalid_argument,
                  "the token file " + path +
                      " does not hold a token (one line of 16 to 256 letters, digits, '_' or '-'); "
                      "copy it again from the head, or delete it on the head to make a new one"};
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
    out.warning = "the token file " + path + " can be read by other users; chmod 600 it";
  return out;
}

expected<std::string> random_token() {
  unsigned char raw[32];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = ::getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return status{errc::invalid_argument, std::string{"no randomness for a token: "} + std::strerror(errno)};
    got += static_cast<size_t>(n);
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : raw) {
    token += hex[b >> 4];
    token += hex[b & 15];
  }
  return token;
}

status write_token_file(const std::string& path, const std::string& token) {
  if (auto dir = make_parent(path); !dir) return dir;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
  if (fd < 0) return status{errc::invalid_argument, "cannot write the token file " + path + ": " + std::strerror(errno)};
  std::string line = token + "\n";
  bool ok = ::fchmod(fd, 0600) == 0;  // whatever the umask, and an older file's mode
  ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ok;
  ok = ::close(fd) == 0 && ok;
  if (!ok) return status{errc::invalid_argument, "cannot write the token file " + path + ": " + std::strerror(errno)};
  return status::ok();
}

expected<token_file> ensure_token(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return read_token(path);
  if (auto dir = make_parent(path); !dir) return dir;
  auto made = random_token();
  if (!made) return made.error();
  const std::string& token = *made;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return read_token(path);  // another process made it first
    return status{errc::invalid_argument, "cannot create the token file " + path + ": " + std::strerror(errno)};
  }
  std::string line = token + "\n";
  bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::fchmod(fd, 0600);  // whatever the umask
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    ::unlink(path.c_str());
    return status{errc::invalid_argument, "cannot write the token file " + path};
  }
  return token_file{token, true, {}};
}

bool token_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace tune
