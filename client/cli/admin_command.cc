#include "client/cli/admin_command.h"

#include <google/protobuf/util/json_util.h>

#include <CLI/CLI.hpp>
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/client.h"
#include "common/content_hasher.h"
#include "common/data_plane_name.h"
#include "common/status_macros.h"

namespace fedgather::cli {
namespace {

void AddConnectionOptions(CLI::App* command, AdminCommandOptions* options) {
  command->add_option("--server", options->server, "HOST:PORT")->required();
  command
      ->add_option("--tls-dir", options->tls_dir,
                   "directory with cert.pem, key.pem, ca.pem")
      ->required();
}

absl::StatusOr<std::unique_ptr<Client>> ConnectAs(
    const AdminCommandOptions& options) {
  ClientOptions client;
  client.server_address = options.server;
  FG_ASSIGN_OR_RETURN(client.tls, ReadTlsDir(options.tls_dir));
  return Client::Connect(client);
}

std::string HumanBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  if (bytes < (1 << 20)) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  if (bytes < (uint64_t{1} << 30)) {
    return absl::StrFormat("%.1f MiB", bytes / 1048576.0);
  }
  return absl::StrFormat("%.2f GiB", bytes / 1073741824.0);
}

// PrintRound prints a round in flight: who has contributed, each rank's
// bytes in and out, and the time left to its deadline.
void PrintRound(const v1::GroupStatus& group, const v1::RoundProgress& round,
                std::ostream& out) {
  out << "  round seq " << round.seq() << ": " << round.complete_ranks_size()
      << " of " << group.world_size() << " contributed";
  if (round.deadline_in_ms() != 0) {
    out << absl::StrFormat(", deadline in %.1f s",
                           round.deadline_in_ms() / 1000.0);
  }
  out << ", " << HumanBytes(round.buffered_bytes()) << " buffered\n";
  out << absl::StrFormat("    %-5s %-40s %-12s %10s %10s\n", "rank", "identity",
                         "state", "in", "out");
  for (int r = 0; r < round.bytes_in_size(); ++r) {
    const auto has = [r](const auto& ranks) {
      return std::find(ranks.begin(), ranks.end(), static_cast<uint32_t>(r)) !=
             ranks.end();
    };
    const char* state = has(round.complete_ranks())  ? "contributed"
                        : has(round.started_ranks()) ? "uploading"
                                                     : "missing";
    const std::string identity =
        r < group.members_size() ? group.members(r).identity() : "";
    out << absl::StrFormat(
        "    %-5d %-40s %-12s %10s %10s\n", r, identity, state,
        HumanBytes(round.bytes_in(r)),
        HumanBytes(r < round.bytes_out_size() ? round.bytes_out(r) : 0));
  }
}

}  // namespace

AdminCommands AddAdminCommands(CLI::App* app, AdminCommandOptions* options) {
  AdminCommands commands;
  commands.status = app->add_subcommand(
      "status", "show groups, members, waiting identities and rounds");
  AddConnectionOptions(commands.status, options);
  commands.status->add_option("--group", options->group,
                              "one group (default: every group you may see)");
  commands.status->add_flag("--json", options->json, "print JSON");

  CLI::App* round = app->add_subcommand("round", "round control (admins)");
  round->require_subcommand(1);
  commands.round_abort = round->add_subcommand(
      "abort", "abort a group's rounds in flight on every rank");
  AddConnectionOptions(commands.round_abort, options);
  commands.round_abort->add_option("--group", options->group, "group")
      ->required();
  commands.round_abort->add_option("--reason", options->reason,
                                   "why, for the audit log and every rank");

  CLI::App* policy = app->add_subcommand("policy", "policy (server admins)");
  policy->require_subcommand(1);
  commands.policy_reload = policy->add_subcommand(
      "reload", "make the server re-read its policy and CRL files");
  AddConnectionOptions(commands.policy_reload, options);

  commands.health = app->add_subcommand(
      "health",
      "exit 0 when the server's gRPC health service says SERVING, else 1 "
      "(for container probes)\n  example: fedgather health --server "
      "localhost:50051 --tls-dir /etc/fedgather/tls");
  AddConnectionOptions(commands.health, options);
  commands.health
      ->add_option("--timeout", options->timeout_s,
                   "seconds to wait for the answer")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  return commands;
}

absl::Status RunStatus(const AdminCommandOptions& options, std::ostream& out) {
  FG_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectAs(options));
  FG_ASSIGN_OR_RETURN(const v1::StatusReply reply,
                      client->GetStatus(options.group));
  if (options.json) {
    std::string json;
    google::protobuf::util::JsonPrintOptions print;
    print.add_whitespace = true;
    print.always_print_primitive_fields = true;
    print.preserve_proto_field_names = true;
    if (!google::protobuf::util::MessageToJsonString(reply, &json, print)
             .ok()) {
      return absl::InternalError("cannot print the status as JSON");
    }
    out << json;
    return absl::OkStatus();
  }
  for (const v1::GroupStatus& group : reply.groups()) {
    out << "group " << group.name() << " (your role: " << group.role()
        << "): world size " << group.world_size();
    if (group.min_quorum() > 0) out << ", quorum " << group.min_quorum();
    out << ", " << (group.formed() ? "formed" : "not formed");
    if (group.epoch() > 0) out << ", epoch " << group.epoch();
    absl::StatusOr<DigestAlgorithm> digest =
        DigestAlgorithmFromProto(group.digest_algorithm(), "the status");
    out << ", digest "
        << (digest.ok() ? DigestAlgorithmName(*digest)
                        : absl::StrCat(group.digest_algorithm()));
    out << "\n";
    if (group.formed()) {
      out << "  data plane " << DataPlaneName(group.data_plane()) << ": "
          << group.data_plane_reason() << "\n";
    }
    if (group.members_size() > 0) {
      out << absl::StrFormat("  %-5s %-40s %s\n", "rank", "identity",
                             "session");
    }
    const int world = group.members_size();
    for (const v1::Member& member : group.members()) {
      out << absl::StrFormat(
          "  %-5d %-40s %s%s\n", member.rank(), member.identity(),
          member.connected() ? "connected" : "disconnected (may resume)",
          member.peer_endpoint().empty()
              ? ""
              : absl::StrCat(", peer endpoint ", member.peer_endpoint()));
      // Its two ring links, as it reported them (docs/protocol.md, "Data
      // planes").
      if (group.data_plane() == v1::DATA_PLANE_DIRECT && world > 1) {
        out << absl::StrFormat(
            "        link to rank %d: %d bytes sent; link from rank %d: %d "
            "bytes received\n",
            (member.rank() + 1) % world, member.peer_link_bytes_sent(),
            (member.rank() + world - 1) % world,
            member.peer_link_bytes_received());
      }
    }
    for (const std::string& waiting : group.waiting()) {
      out << "  waiting  " << waiting << "\n";
    }
    for (const v1::RoundProgress& round : group.rounds()) {
      PrintRound(group, round, out);
    }
  }
  if (reply.groups().empty()) out << "no groups visible to this identity\n";
  return absl::OkStatus();
}

absl::Status RunRoundAbort(const AdminCommandOptions& options,
                           std::ostream& out) {
  FG_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectAs(options));
  FG_ASSIGN_OR_RETURN(const v1::AbortRoundReply reply,
                      client->AbortRound(options.group, options.reason));
  out << "aborted " << reply.aborted_seqs_size() << " round(s) of group "
      << options.group;
  if (reply.aborted_seqs_size() > 0) {
    out << ": seq " << absl::StrJoin(reply.aborted_seqs(), ", ");
  }
  out << "\n";
  return absl::OkStatus();
}

absl::Status RunPolicyReload(const AdminCommandOptions& options,
                             std::ostream& out) {
  FG_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectAs(options));
  FG_ASSIGN_OR_RETURN(const v1::ReloadPolicyReply reply,
                      client->ReloadPolicy());
  out << "policy reloaded: " << reply.groups() << " group(s), sha256 "
      << reply.policy_sha256() << "\n";
  return absl::OkStatus();
}

absl::Status RunHealth(const AdminCommandOptions& options, std::ostream& out) {
  FG_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, ConnectAs(options));
  FG_RETURN_IF_ERROR(client->CheckHealth(absl::Seconds(options.timeout_s)));
  out << "SERVING\n";
  return absl::OkStatus();
}

}  // namespace fedgather::cli
