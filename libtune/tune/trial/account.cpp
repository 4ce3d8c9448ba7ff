#include "tune/trial/account.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tune {

namespace {

std::vector<gid_t> groups_of(const char* name, gid_t primary) {
  int n = 32;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  while (::getgrouplist(name, primary, groups.data(), &n) < 0) groups.resize(static_cast<size_t>(n) + 16), n = static_cast<int>(groups.size());
  groups.resize(static_cast<size_t>(n));
  return groups;
}

std::string mode_text(const struct stat& s) {
  std::string m = "d---------";
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i)
    if (s.st_mode & (1u << (8 - i))) m[static_cast<size_t>(i) + 1] = rwx[i];
  std::string owner = std::to_string(s.st_uid), group = std::to_string(s.st_gid);
  if (auto* p = ::getpwuid(s.st_uid)) owner = p->pw_name;
  if (auto* g = ::getgrgid(s.st_gid)) group = g->gr_name;
  return m + " " + owner + ":" + group;
}

// Only the calling thread: the raw system calls (glibc's wrappers of setgroups and the
// set*id calls change every thread of the process).
void set_thread_identity(uid_t fsuid, gid_t fsgid, const std::vector<gid_t>& groups) {
  (void)::syscall(SYS_setgroups, groups.size(), groups.data());
  (void)::syscall(SYS_setfsgid, fsgid);
  (void)::syscall(SYS_setfsuid, fsuid);
}

}  // namespace

expected<unix_account> find_account(const std::string& name) {
  if (name.empty()) return status{errc::invalid_argument, "no account named"};
  std::vector<char> buf(16384);
  passwd pw{}, *found = nullptr;
  int e = ::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
  if (e != 0 || !found)
    return status{errc::not_found, "no Unix account " + name + " on this machine" +
                                       (e ? std::string{" ("} + ::strerror(e) + ")" : std::string{}) +
                                       ": create it (useradd --system --no-create-home " + name + ") or name another"};
  if (pw.pw_uid == 0)
    return status{errc::invalid_argument, "account " + name + " is root (uid 0): trials never run as root; name an "
                                          "unprivileged account"};
  unix_account a;
  a.name = name;
  a.uid = pw.pw_uid;
  a.gid = pw.pw_gid;
  a.groups = groups_of(name.c_str(), pw.pw_gid);
  a.home = pw.pw_dir ? pw.pw_dir : "";
  a.switches = ::geteuid() == 0;
  return a;
}

unix_account own_account() {
  unix_account a;
  a.uid = ::geteuid();
  a.gid = ::getegid();
  if (auto* p = ::getpwuid(a.uid)) a.name = p->pw_name, a.home = p->pw_dir ? p->pw_dir : "";
  else a.name = std::to_string(a.uid);
  int n = ::getgroups(0, nullptr);
  a.groups.resize(static_cast<size_t>(std::max(n, 0)));
  if (n > 0) a.groups.resize(static_cast<size_t>(std::max(::getgroups(n, a.groups.data()), 0)));
  return a;
}

expected<unix_account> trial_account(const std::string& wanted) {
  if (::geteuid() == 0) return find_account(wanted.empty() ? "nobody" : wanted);
  auto a = own_account();
  if (!wanted.empty() && wanted != a.name)
    return status{errc::invalid_argument, "this node runs as " + a.name + ", not as root: its trials run as " + a.name +
                                              " and cannot run as " + wanted + " (start the node as root to choose the "
                                              "trials' account, or leave --trial-user out)"};
  return a;
}

expected<unix_account> own_trial_account(const std::string& wanted) {
  auto a = own_account();
  if (wanted.empty() || wanted == a.name) return a;
  return trial_account(wanted);
}

status reachable(const unix_account& account, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto full = fs::absolute(path, ec).lexically_normal();
  if (ec) return status{errc::invalid_argument, "cannot resolve " + path + ": " + ec.message()};
  fs::path at;
  for (auto& part : full) {
    at /= part;
    struct stat s {};
    if (::stat(at.c_str(), &s) != 0) break;  // not made yet: the node makes it, searchable
    if (!S_ISDIR(s.st_mode)) return status{errc::invalid_argument, at.string() + " is not a folder"};
    bool member = s.st_gid == account.gid || std::count(account.groups.begin(), account.groups.end(), s.st_gid);
    mode_t bit = s.st_uid == account.uid ? S_IXUSR : member ? S_IXGRP : S_IXOTH;
    if (account.uid != 0 && !(s.st_mode & bit))
      return status{errc::invalid_argument,
                    "trials run as " + account.name + ", who cannot enter " + at.string() + " (" + mode_text(s) +
                        ") on the way to " + full.string() + ": make it searchable (chmod o+x " + at.string() +
                        "), or give the node a folder (--dir) that " + account.name + " can reach"};
  }
  return status::ok();
}

as_account::as_account(const unix_account& account) {
  if (!account.switches) return;
  int n = ::getgroups(0, nullptr);
  saved_groups_.resize(static_cast<size_t>(std::max(n, 0)));
  if (n > 0) saved_groups_.resize(static_cast<size_t>(std::max(::getgroups(n, saved_groups_.data()), 0)));
  set_thread_identity(account.uid, account.gid, account.groups);
  switched_ = true;
}

as_account::~as_account() {
  if (!switched_) return;
  int saved = errno;
  (void)::syscall(SYS_setfsuid, ::geteuid());  // first: root's file capabilities come back with it
  (void)::syscall(SYS_setfsgid, ::getegid());
  (void)::syscall(SYS_setgroups, saved_groups_.size(), saved_groups_.data());
  errno = saved;
}

}  // namespace tune
