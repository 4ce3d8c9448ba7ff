#include "basp_fd.hpp"

#include <caf/io/basp_broker.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/scribe_impl.hpp>

namespace tune {

namespace {

using multiplexer = caf::io::network::default_multiplexer;

// A connection whose address CAF does not look up (see the header).
class fd_scribe : public caf::io::network::scribe_impl {
 public:
  fd_scribe(multiplexer& mx, int fd, std::string peer) : scribe_impl(mx, fd), peer_(std::move(peer)) {}
  std::string addr() const override { return peer_; }
  uint16_t port() const override { return 0; }

 private:
  std::string peer_;
};

caf::io::scribe_ptr make_scribe(caf::actor_system& sys, int fd, const std::string& peer) {
  auto& mx = dynamic_cast<multiplexer&>(sys.middleman().backend());
  return caf::make_counted<fd_scribe>(mx, fd, peer);
}

}  // namespace

caf::actor basp_broker(caf::actor_system& sys) {
  return sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
}

void serve_fd(caf::actor_system& sys, int fd, const caf::actor& whom, uint16_t key, const std::string& peer) {
  caf::anon_send(basp_broker(sys), caf::publish_atom::value, make_scribe(sys, fd, peer), key,
                 caf::actor_cast<caf::strong_actor_ptr>(whom), std::set<std::string>{});
}

caf::message connect_fd_message(caf::actor_system& sys, int fd, const std::string& peer) {
  return caf::make_message(caf::connect_atom::value, make_scribe(sys, fd, peer), uint16_t{0});
}

}  // namespace tune
