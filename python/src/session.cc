#include "python/src/session.h"

#include <utility>

#include "common/status_macros.h"
#include "common/tls_credentials.h"
#include "python/src/gil.h"

namespace fedgather::python {

absl::StatusOr<std::shared_ptr<Session>> Session::Join(
    const SessionOptions& options) {
  FG_ASSIGN_OR_RETURN(TlsFiles tls, ReadTlsDir(options.tls_dir));
  FG_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                      Client::Connect({options.server, std::move(tls)}));
  JoinOptions join;
  join.group = options.group;
  join.world_size = options.world_size;
  join.rank = options.rank;
  join.timeout = options.join_timeout;
  join.peer_listen = options.peer_listen;
  join.peer_advertise = options.peer_advertise;
  FG_ASSIGN_OR_RETURN(std::unique_ptr<Group> group, client->Join(join));
  return std::shared_ptr<Session>(
      new Session(options.server, std::move(client), std::move(group)));
}

Session::Session(std::string server, std::unique_ptr<Client> client,
                 std::unique_ptr<Group> group)
    : server_(std::move(server)),
      client_(std::move(client)),
      group_(std::move(group)) {}

Session::~Session() {
  // Leaving joins the group's collective thread, whose last task may need
  // the GIL to free a tensor Python owns.
  WithoutGil([this] {
    group_.reset();  // leaves the group while the channel is still there
    client_.reset();
  });
}

}  // namespace fedgather::python
