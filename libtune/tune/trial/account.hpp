// The Unix account a trial runs as. A cluster's node that runs as root never runs a trial
// as root: its trials run as its --trial-user (`nobody` when not given), or as the
// account mapped in the submitting user's settings (docs/users.md). A node that does not
// run as root runs its trials as itself and cannot switch. An embedded cluster (a tuning
// script's own, `tune run` without a cluster) runs them as the user who started it.
//
// The worker drops to the account just before exec (process.hpp: run_as); what the node
// prepares in a trial's folder beforehand (its working copy, a checkpoint it restores)
// is written with the account's file-system identity (as_account), so that a link the
// trial left in its folder cannot make the node write or read as root where the account
// could not.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

#include "tune/core/status.hpp"

namespace tune {

struct unix_account {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (its primary one included)
  std::string home;           // its home folder, from the password database
  bool switches = false;      // the caller is root and changes to it; false: the caller's own
};

// The account named `name`, with its groups. Refused: an unknown name, and root (uid 0)
// — trials never run as root.
expected<unix_account> find_account(const std::string& name);

// This process's own account (nothing switches): the default of what runs trials
// without a node (tests of the actors alone).
unix_account own_account();

// Who this process's trials run as: `wanted` (empty: `nobody`) when it runs as root;
// when not, itself, and `wanted` must be empty or its own name.
expected<unix_account> trial_account(const std::string& wanted);
// Who an embedded cluster's trials run as: this process's own account (root included:
// running them is running the script yourself; an embedded cluster listens on no port),
// unless `wanted` names another, which needs root as trial_account does.
expected<unix_account> own_trial_account(const std::string& wanted);

// Whether `account` can reach (search every folder on the way to) `path`, from its
// permission bits. An error names the first folder it cannot pass and what to do.
status reachable(const unix_account& account, const std::string& path);

// For the life of this object, the calling thread opens, creates and checks files as
// `account` (its file-system user and group and its supplementary groups; nothing else of
// the process changes). Nothing changes for an account that does not switch. Files it
// creates belong to the account.
class as_account {
 public:
  explicit as_account(const unix_account& account);
  ~as_account();
  as_account(const as_account&) = delete;
  as_account& operator=(const as_account&) = delete;

 private:
  bool switched_ = false;
  std::vector<gid_t> saved_groups_;
};

}  // namespace tune
