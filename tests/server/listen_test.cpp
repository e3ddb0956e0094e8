// loom serve's listening socket: its accept backlog is the server's listen_backlog (capped
// by the kernel's net.core.somaxconn), not cpp-httplib's 5. The kernel reports a listening
// socket's backlog through sock_diag (what `ss -lt` shows as Send-Q), asked here over
// netlink for the server's loopback port.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "loom/loader.hpp"
#include "loom/log.hpp"
#include "server.hpp"

namespace {

std::shared_ptr<const loom::Model> demo() {
  static const auto model = loom::load_model(LOOM_SOURCE_DIR "/examples/models/stories260K/stories260K.bin", {});
  return model;
}

// The kernel's cap on every backlog.
int somaxconn() {
  std::ifstream in("/proc/sys/net/core/somaxconn");
  int v = 0;
  in >> v;
  return v > 0 ? v : 4096;
}

// The backlog of the IPv4 TCP socket listening on `port`, from the kernel; nullopt with
// `why` when netlink's sock_diag cannot be asked here.
std::optional<uint32_t> listen_backlog(int port, std::string* why) {
  const int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) {
    *why = std::string("no sock_diag netlink socket: ") + std::strerror(errno);
    return std::nullopt;
  }
  struct {
    nlmsghdr nh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nh.nlmsg_len = sizeof msg;
  msg.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  msg.req.sdiag_family = AF_INET;
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = 1u << TCP_LISTEN;
  std::optional<uint32_t> found;
  if (::send(fd, &msg, sizeof msg, 0) < 0) {
    *why = std::string("sock_diag request refused: ") + std::strerror(errno);
    ::close(fd);
    return std::nullopt;
  }
  alignas(nlmsghdr) char buf[16384];
  for (bool done = false; !done;) {
    const ssize_t got = ::recv(fd, buf, sizeof buf, 0);
    if (got <= 0) {
      *why = "sock_diag gave no answer";
      break;
    }
    auto n = static_cast<unsigned>(got);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
        if (h->nlmsg_type == NLMSG_ERROR) *why = "sock_diag answered with an error";
        done = true;
        break;
      }
      const auto* d = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      if (ntohs(d->id.idiag_sport) == port) found = d->idiag_wqueue;  // a listener's max backlog
    }
  }
  ::close(fd);
  if (!found && why->empty()) *why = "no listening socket on port " + std::to_string(port);
  return found;
}

loom::server::ServerOptions options() {
  loom::server::ServerOptions o;
  o.port = 0;
  o.scheduler.parallel = 1;
  o.scheduler.n_threads = 1;
  o.logger = loom::Logger::silent();
  return o;
}

}  // namespace

TEST_CASE("server: the listening socket's backlog is listen_backlog, not httplib's 5") {
  for (const int asked : {0, 300}) {
    loom::server::ServerOptions o = options();
    if (asked > 0) o.listen_backlog = asked;
    const int expected = std::min(asked > 0 ? asked : loom::server::ServerOptions{}.listen_backlog, somaxconn());
    REQUIRE(expected > 5);
    loom::server::Server server(demo(), o);
    const int port = server.start();
    std::string why;
    const std::optional<uint32_t> backlog = listen_backlog(port, &why);
    server.shutdown();
    if (!backlog) {
      WARN("SKIPPED: " << why);
      return;
    }
    CHECK(*backlog == static_cast<uint32_t>(expected));
  }
}
