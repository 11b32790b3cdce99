// fedgather: the participant CLI (provision, join, status, round abort,
// policy reload, health, audit verify, revoke).
// See docs/cli.md.
#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "client/cli/admin_command.h"
#include "client/cli/audit_command.h"
#include "client/cli/join_command.h"
#include "client/cli/revoke_command.h"
#include "client/provision.h"

namespace {

int Report(const char* command, const absl::Status& status) {
  if (status.ok()) return 0;
  std::cerr << "fedgather " << command << ": "
            << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedgather: federated all_gather over mutual TLS"};
  app.require_subcommand(1);

  fedgather::ProvisionOptions provision;
  std::string server_names = "localhost,127.0.0.1";
  std::string participants;
  CLI::App* provision_cmd = app.add_subcommand(
      "provision",
      "create a CA, server and participant certificates, and policy.yaml");
  provision_cmd->add_option("--out", provision.out_dir, "output directory")
      ->required();
  provision_cmd
      ->add_option("--server-names", server_names,
                   "comma-separated DNS names and IPs of the server")
      ->capture_default_str();
  provision_cmd
      ->add_option("--participants", participants,
                   "comma-separated participant names, e.g. site-1,site-2")
      ->required();
  provision_cmd->add_option("--group", provision.group, "group to declare")
      ->capture_default_str();
  std::string observers, admins;
  provision_cmd->add_option("--observers", observers,
                            "comma-separated observer names (status only)");
  provision_cmd->add_option(
      "--admins", admins,
      "comma-separated admin names (status, round abort, policy reload)");

  fedgather::cli::JoinCommandOptions join;
  int rank = -1;
  double timeout_s = 300;
  CLI::App* join_cmd = app.add_subcommand(
      "join", "contribute a file to one collective (all_gather by default)");
  join_cmd->add_option("--server", join.server, "HOST:PORT")->required();
  join_cmd
      ->add_option("--tls-dir", join.tls_dir,
                   "directory with cert.pem, key.pem, ca.pem")
      ->required();
  join_cmd->add_option("--group", join.group, "group name")->required();
  join_cmd->add_option("--world-size", join.world_size, "members in the group")
      ->required();
  join_cmd->add_option("--input", join.input, "input .safetensors")->required();
  join_cmd->add_option("--output", join.output, "output .safetensors")
      ->required();
  join_cmd->add_option("--rank", rank, "rank to ask for (default: assigned)");
  join_cmd
      ->add_option("--timeout", timeout_s,
                   "seconds to wait for the group and the round")
      ->capture_default_str();
  join_cmd
      ->add_option("--op", join.op,
                   "all_gather, all_gather_v, all_gather_bytes (the input is "
                   "any file), all_reduce or broadcast")
      ->check(CLI::IsMember({"all_gather", "all_gather_v", "all_gather_bytes",
                             "all_reduce", "broadcast"}))
      ->capture_default_str();
  join_cmd
      ->add_option("--reduce", join.reduce,
                   "all_reduce: sum, mean, min, max or weighted_mean")
      ->check(CLI::IsMember({"sum", "mean", "min", "max", "weighted_mean"}))
      ->capture_default_str();
  join_cmd
      ->add_option("--weight", join.weight,
                   "all_reduce weighted_mean: this site's example count")
      ->capture_default_str();
  join_cmd->add_option("--root", join.root, "broadcast: the sending rank")
      ->capture_default_str();
  join_cmd
      ->add_option("--gpus", join.gpus,
                   "all_gather on this node's G GPUs: each input is [G, ...], "
                   "slice g for GPU g; writes [N*G, ...] (docs/gpu.md)")
      ->check(CLI::PositiveNumber);
  join_cmd
      ->add_option("--peer-listen", join.peer_listen,
                   "HOST:PORT to accept peer links on, offered to the "
                   "group for the direct data plane (docs/protocol.md)")
      ->envname("FEDGATHER_PEER_LISTEN");
  join_cmd
      ->add_option("--peer-advertise", join.peer_advertise,
                   "HOST:PORT the other members dial (default: the "
                   "--peer-listen host and port)")
      ->envname("FEDGATHER_PEER_ADVERTISE");
  join_cmd->add_flag("--emulate-gpus", join.emulate_gpus,
                     "with --gpus: emulate the GPUs in host memory");
  join_cmd->add_flag(
      "--insecure-plaintext-for-benchmarks",
      join.insecure_plaintext_for_benchmarks,
      "benchmarks only: connect without TLS to a server started with the "
      "same flag (it trusts the identity --tls-dir/cert.pem names)");

  fedgather::cli::AuditVerifyCommandOptions audit_verify;
  CLI::App* audit_verify_cmd =
      fedgather::cli::AddAuditCommand(&app, &audit_verify);

  fedgather::cli::AdminCommandOptions admin;
  const fedgather::cli::AdminCommands admin_cmds =
      fedgather::cli::AddAdminCommands(&app, &admin);

  fedgather::cli::RevokeCommandOptions revoke;
  CLI::App* revoke_cmd = fedgather::cli::AddRevokeCommand(&app, &revoke);

  join_cmd->add_flag("--quiet", join.quiet,
                     "print nothing but errors (no progress, no summary)");
  // Every command's --help ends with an example.
  const std::map<std::string, std::string> examples = {
      {"provision",
       "fedgather provision --out pki --participants site-1,site-2 "
       "--observers dashboard --admins ops"},
      {"join",
       "fedgather join --server 127.0.0.1:50051 --tls-dir pki/site-1 "
       "--group demo --world-size 2 --input in.safetensors --output "
       "out.safetensors [--op all_reduce --reduce weighted_mean --weight "
       "1200]"},
      {"status",
       "fedgather status --server 127.0.0.1:50051 --tls-dir pki/dashboard "
       "--group demo [--json]"},
      {"abort",
       "fedgather round abort --server 127.0.0.1:50051 --tls-dir pki/ops "
       "--group demo --reason \"bad data from site-2\""},
      {"reload",
       "fedgather policy reload --server 127.0.0.1:50051 --tls-dir pki/ops"},
      {"health",
       "fedgather health --server localhost:50051 --tls-dir pki/server"},
      {"verify",
       "fedgather audit verify --cert pki/server/cert.pem audit.jsonl"},
      {"revoke",
       "fedgather revoke --ca-dir pki --crl pki/crl.pem pki/site-2/cert.pem"},
  };
  std::vector<CLI::App*> commands = app.get_subcommands({});
  for (size_t i = 0; i < commands.size(); ++i) {
    for (CLI::App* nested : commands[i]->get_subcommands({})) {
      commands.push_back(nested);
    }
    if (auto it = examples.find(commands[i]->get_name());
        it != examples.end()) {
      commands[i]->footer("\nExample:\n  " + it->second);
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; every usage error exits 2.
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (*provision_cmd) {
    provision.server_names =
        absl::StrSplit(server_names, ',', absl::SkipEmpty());
    provision.participants =
        absl::StrSplit(participants, ',', absl::SkipEmpty());
    provision.observers = absl::StrSplit(observers, ',', absl::SkipEmpty());
    provision.admins = absl::StrSplit(admins, ',', absl::SkipEmpty());
    return Report("provision", fedgather::Provision(provision));
  }
  if (*audit_verify_cmd) {
    return Report("audit verify",
                  fedgather::cli::RunAuditVerify(audit_verify, std::cout));
  }
  if (*admin_cmds.status) {
    return Report("status", fedgather::cli::RunStatus(admin, std::cout));
  }
  if (*admin_cmds.round_abort) {
    return Report("round abort",
                  fedgather::cli::RunRoundAbort(admin, std::cout));
  }
  if (*admin_cmds.policy_reload) {
    return Report("policy reload",
                  fedgather::cli::RunPolicyReload(admin, std::cout));
  }
  if (*admin_cmds.health) {
    return Report("health", fedgather::cli::RunHealth(admin, std::cout));
  }
  if (*revoke_cmd) {
    return Report("revoke", fedgather::cli::RunRevoke(revoke, std::cout));
  }
  if (rank >= 0) join.rank = rank;
  join.timeout = absl::Milliseconds(timeout_s * 1000.0);
  return Report("join", fedgather::cli::RunJoin(join));
}
