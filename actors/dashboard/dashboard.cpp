#include "dashboard.hpp"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "transport/gate.hpp"
#include "log.hpp"
#include "tune/core/json_text.hpp"
#include "tune/cluster/token.hpp"
#include "wire.hpp"

namespace tune {

namespace {

constexpr const char* cookie_name = "tune_token";

// The token a request carries: Bearer header, then the cookie.
std::string presented_token(const httplib::Request& req) {
  auto auth = req.get_header_value("Authorization");
  if (auth.rfind("Bearer ", 0) == 0) return auth.substr(7);
  auto cookies = req.get_header_value("Cookie");
  std::string key = std::string{cookie_name} + "=";
  for (size_t pos = 0; pos < cookies.size();) {
    size_t end = cookies.find(';', pos);
    if (end == std::string::npos) end = cookies.size();
    auto item = cookies.substr(pos, end - pos);
    item.erase(0, item.find_first_not_of(' '));
    if (item.rfind(key, 0) == 0) return item.substr(key.size());
    pos = end + 1;
  }
  return {};
}

void security_headers(httplib::Response& res) {
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-store");
}

std::string login_page(const std::string& message) {
  std::string page = find_dashboard_asset("/login")->body;
  auto at = page.find("@MESSAGE@");
  std::string escaped;
  for (char c : message) escaped += c == '<' ? std::string{"&lt;"} : c == '&' ? std::string{"&amp;"} : std::string(1, c);
  if (at != std::string::npos) page.replace(at, 9, escaped);
  return page;
}

void json_error(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  res.set_content(json_text(nlohmann::json{{"error", message}}), "application/json");
}

}  // namespace

// httplib serving on a socket made here (a Unix socket in a 0700 folder): only the
// dashboard's gate reaches it.
struct unix_http_server : httplib::Server {
  void take(int listening_fd) { svr_sock_ = listening_fd; }
};

struct dashboard_server::impl {
  caf::actor_system* sys = nullptr;
  caf::actor head;
  dashboard_options opt;
  unix_http_server server;
  // The public port: a gate that holds each connection (TLS ended there) until its whole
  // request head arrived, and only then connects it to httplib, which answers one
  // request per connection: idle or slow sockets hold no httplib thread.
  std::unique_ptr<basp_gate> front;
  std::string socket_dir, socket_path;
  std::thread thread;
  std::atomic<bool> listen_ended{false};
  int port = 0;

  ~impl() {
    if (!socket_path.empty()) ::unlink(socket_path.c_str());
    if (!socket_dir.empty()) ::rmdir(socket_dir.c_str());
  }

  // The browser keeps the token it signed in with (the admin's or a user's): only for
  // this site, never for scripts; only over HTTPS when the dashboard uses it.
  void sign_in(httplib::Response& res, const std::string& token) const {
    res.set_header("Set-Cookie", std::string{cookie_name} + "=" + token + "; HttpOnly; SameSite=Strict; Path=/" +
                                     (opt.tls ? "; Secure" : ""));
  }

  // The head's answer to a view asked with `token`: {HTTP status, body}. The head decides
  // who the token is (docs/users.md) and what they may see.
  std::pair<int, std::string> from_head(const std::string& token, const std::string& view, const std::string& a = "",
                                        const std::string& b = "") const {
    caf::scoped_actor self{*sys};
    int code = 503;
    std::string body;
    self->request(head, wire::request_timeout, wire::dashboard_atom::value, token, view, a, b)
        .receive([&](wire::dashboard_atom, int c, std::string& text) { code = c, body = std::move(text); },
                 [&](caf::error& err) {
                   body = json_text(nlohmann::json{{"error", "the head did not answer: " + sys->render(err)}});
                 });
    return {code, std::move(body)};
  }

  // Whether the head takes this token for the dashboard (the admin's or a user's).
  bool accepted(const std::string& token) const { return !token.empty() && from_head(token, "whoami").first == 200; }

  // Asks the head for a view with the request's token; answers with its status and body.
  void ask(const httplib::Request& req, httplib::Response& res, const std::string& view, const std::string& a = "",
           const std::string& b = "", const char* type = "application/json") {
    auto [code, body] = from_head(presented_token(req), view, a, b);
    res.status = code;
    res.set_content(body, code == 200 ? type : "application/json");
  }

  using handled = httplib::Server::HandlerResponse;

  // The token in the address (the link `tune dashboard` prints): kept in a cookie, and
  // the address shown without it.
  handled token_in_address(const httplib::Request& req, httplib::Response& res) const {
    if (accepted(req.get_param_value("token"))) {
      sign_in(res, req.get_param_value("token"));
      res.set_redirect(req.path, 303);
    } else {
      res.status = 401;
      res.set_content(login_page("That token is not this cluster's."), "text/html; charset=utf-8");
    }
    return handled::Handled;
  }

  // Before any route: the security headers, then the token. The API and /metrics pass
  // the token to the head, which answers 401 for one it does not take; the pages need
  // one it takes.
  handled gatekeep(const httplib::Request& req, httplib::Response& res) const {
    security_headers(res);
    if (req.path == "/login" || req.path == "/healthz" || req.path == "/style.css") return handled::Unhandled;
    if (req.method == "GET" && req.has_param("token")) return token_in_address(req, res);
    bool api = req.path.rfind("/api/", 0) == 0 || req.path == "/metrics";
    auto presented = presented_token(req);
    if (api ? !presented.empty() : accepted(presented)) return handled::Unhandled;
    res.status = 401;
    if (req.path.rfind("/api/", 0) == 0)
      res.set_content(json_text(nlohmann::json{{"error", "sign in with the cluster token: an Authorization: Bearer TOKEN header "
                                               "or the tune_token cookie (see docs/dashboard.md)"}}),
                      "application/json");
    else if (req.path == "/metrics")
      res.set_content("the cluster token is needed: Authorization: Bearer TOKEN (Prometheus: authorization.credentials_file)\n",
                      "text/plain");
    else
      res.set_content(login_page(""), "text/html; charset=utf-8");
    return handled::Handled;
  }

  // The sign-in form's answer: the token kept in a cookie if the head takes it.
  void login_posted(const httplib::Request& req, httplib::Response& res) const {
    if (req.has_param("token") && accepted(req.get_param_value("token"))) {
      sign_in(res, req.get_param_value("token"));
      res.set_redirect("/", 303);
      return;
    }
    res.status = 401;
    res.set_content(login_page("That token is not this cluster's."), "text/html; charset=utf-8");
  }

  // The pages: health, signing in, the page's own files.
  void page_routes() {
    auto& s = server;
    s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
    s.Get("/login", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(login_page(""), "text/html; charset=utf-8");
    });
    s.Post("/login", [this](const httplib::Request& req, httplib::Response& res) { login_posted(req, res); });
    for (auto path : {"/", "/app.js", "/style.css"})
      s.Get(path, [path](const httplib::Request&, httplib::Response& res) {
        auto* a = find_dashboard_asset(path);
        res.set_content(a->body, a->content_type);
      });
  }

  // /metrics and the JSON API (docs/dashboard.md): each a view the head answers.
  void api_routes() {
    auto& s = server;
    s.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      ask(req, res, "metrics", "", "", "text/plain; version=0.0.4; charset=utf-8");
    });
    for (auto view : {"cluster", "nodes", "gpus", "groups", "experiments", "whoami"})
      s.Get(std::string{"/api/"} + view, [this, view](const httplib::Request& req, httplib::Response& res) { ask(req, res, view); });
    s.Get(R"(/api/experiments/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      ask(req, res, "experiment", req.matches[1]);
    });
    s.Get(R"(/api/experiments/([^/]+)/trials/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      ask(req, res, "trial", req.matches[1], req.matches[2]);
    });
  }

  // No such page (404 as JSON, naming the API), and an exception in a handler (500).
  void failure_handlers() {
    auto& s = server;
    s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (res.status != 404 || !res.body.empty()) return;
      json_error(res, 404, "no page " + req.path + " (the API: /api/cluster, /api/nodes, /api/gpus, /api/groups, "
                           "/api/experiments, /api/experiments/ID, /api/experiments/ID/trials/TRIAL; /metrics)");
    });
    s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      log_line("dashboard: " + what);
      json_error(res, 500, "the dashboard failed: " + what);
    });
  }

  void routes() {
    auto& s = server;
    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) { return gatekeep(req, res); });
    page_routes();
    api_routes();
    failure_handlers();
    // Not httplib's default SO_REUSEPORT: a second head on the same port must fail, not
    // share the port with the first (the kernel would split requests between them).
    s.set_payload_max_length(64 * 1024);
    s.set_read_timeout(5);
    s.set_write_timeout(10);
    s.set_keep_alive_max_count(1);  // one request per connection: no thread waits on an idle keep-alive
  }
};

dashboard_server::dashboard_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

dashboard_server::~dashboard_server() {
  impl_->front.reset();  // no new connections
  if (impl_->thread.joinable()) impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int dashboard_server::port() const { return impl_->port; }

void dashboard_server::serve(caf::actor head) {
  if (impl_->thread.joinable()) return;
  impl_->head = std::move(head);
  auto* raw = impl_.get();
  impl_->front->run([path = impl_->socket_path] {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    if (fd >= 0) ::close(fd);
    return -1;
  });
  impl_->thread = std::thread([raw] {
    raw->server.listen_after_bind();
    raw->listen_ended = true;
  });
  // Until its loop runs, httplib's stop() does nothing (it would then block in accept()
  // for ever, and this object's destructor with it): return once it runs.
  while (!impl_->server.is_running() && !impl_->listen_ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

expected<std::unique_ptr<dashboard_server>> dashboard_server::bind(caf::actor_system& sys, dashboard_options opt) {
  if (opt.port < 0 || opt.port > 65535) return status{errc::invalid_argument, "--dashboard-port must be between 0 and 65535"};
  auto p = std::make_unique<impl>();
  p->sys = &sys;
  p->opt = std::move(opt);
  p->routes();
  auto& o = p->opt;
  std::string host = o.host.empty() ? "0.0.0.0" : o.host;
  auto listen = [&](int port) {
    gate_options g;
    g.host = host;
    g.port = static_cast<uint16_t>(port);
    g.http = true;
    g.tls = o.tls;
    return basp_gate::listen(g);
  };
  auto front = listen(o.port);
  if (!front && o.port != 0 && o.any_port_if_taken) {
    front = listen(0);
    if (front) log_line("dashboard: port " + std::to_string(o.port) + " is taken; listening on " + std::to_string((*front)->port()));
  }
  if (!front)
    return status{errc::invalid_argument,
                  "the dashboard cannot listen on " + host + ":" + std::to_string(o.port) +
                      " (in use, or not an address of this machine); give --dashboard-port another port, 0 for any "
                      "free one, or --no-dashboard"};
  p->front = std::move(*front);
  p->port = p->front->port();
  // httplib behind it, on a Unix socket in a folder only this process's user can enter.
  sockaddr_un a{};
  std::string dir = "/libtune-dashboard-XXXXXX";
  bool fits = !o.socket_parent.empty() && o.socket_parent.size() + dir.size() + 10 < sizeof a.sun_path;
  dir.insert(0, fits ? o.socket_parent : std::string{"/tmp"});
  if (!::mkdtemp(dir.data()))
    return status{errc::invalid_argument, "the dashboard: mkdtemp " + dir + ": " + std::strerror(errno)};
  p->socket_dir = dir;
  p->socket_path = p->socket_dir + "/http.sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", p->socket_path.c_str());
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 256) != 0) {
    if (fd >= 0) ::close(fd);
    return status{errc::invalid_argument, "the dashboard cannot listen on " + p->socket_path + ": " + std::strerror(errno)};
  }
  p->server.take(fd);
  return std::unique_ptr<dashboard_server>(new dashboard_server(std::move(p)));
}

}  // namespace tune
