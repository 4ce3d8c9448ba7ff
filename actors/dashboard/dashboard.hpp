// The head's web dashboard and its JSON API and Prometheus metrics, on a port of its
// own (default 8265), behind the cluster token (docs/dashboard.md). HTTP is
// cpp-httplib's (Debian's libcpp-httplib); every answer's data comes from the head actor
// (wire::dashboard_atom), so the page shows exactly what `tune status` does.
//
// Sign-in: the token as `Authorization: Bearer TOKEN` (scripts, Prometheus), or once in
// the page's address (`/?token=TOKEN`, what `tune dashboard` prints) or the sign-in
// form, after which the browser keeps it in an HttpOnly, SameSite=Strict cookie.
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <string>

#include "tune/core/status.hpp"

namespace tune {

namespace tls {
class context;
}

struct dashboard_options {
  std::string host = "0.0.0.0";  // the address to listen on
  int port = 8265;               // 0: any free port
  bool any_port_if_taken = false;  // the default port in use: take any free one instead of failing
  // HTTPS with the cluster's certificate (the head's --tls-*), cookies marked Secure; null: HTTP.
  std::shared_ptr<tls::context> tls{};
  // Where the folder of the socket behind the port is made (the head's runtime dir, the
  // embedded cluster's folder: what a killed process leaves is there, not in /tmp);
  // /tmp when empty or too long for a socket's address. Removed when the server ends.
  std::string socket_parent{};
  // No token here: every request's token goes to the head, which says who it is and
  // what they may see (docs/users.md).
};

class dashboard_server {
 public:
  // Takes the port (so that the head can show the dashboard's address from its start);
  // serve() then answers requests on threads of its own until destroyed.
  static expected<std::unique_ptr<dashboard_server>> bind(caf::actor_system& sys, dashboard_options opt);
  void serve(caf::actor head);
  ~dashboard_server();
  dashboard_server(const dashboard_server&) = delete;
  dashboard_server& operator=(const dashboard_server&) = delete;

  int port() const;

 private:
  struct impl;
  explicit dashboard_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

// The page's files, built into the program (actors/dashboard/*, embedded by CMake).
struct dashboard_asset {
  const char* path;          // "/", "/app.js", ...
  const char* content_type;
  const char* body;
};
const dashboard_asset* find_dashboard_asset(const std::string& path);

}  // namespace tune
