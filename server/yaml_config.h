// YamlConfig: lets CLI11 read a command's flags from a YAML file
// (fedgather-server --config FILE). The file is a map from flag names,
// without the leading "--", to a value or a list of values:
//
//   listen: 0.0.0.0:50051
//   audit-log: /var/log/fedgather/audit.jsonl
//   audit-unsigned: false
//
// CLI11 applies a value only to a flag the command line did not set, so
// flags take precedence over the file; a key that names no flag is an
// error naming it. to_config writes the same format (--check-config).
#ifndef FEDGATHER_SERVER_YAML_CONFIG_H_
#define FEDGATHER_SERVER_YAML_CONFIG_H_

#include <CLI/CLI.hpp>
#include <istream>
#include <string>
#include <vector>

namespace fedgather::server {

class YamlConfig : public CLI::Config {
 public:
  // from_config throws CLI::ConversionError for a file that is not a YAML
  // map of scalars and lists of scalars, naming the key or the line.
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
  std::string to_config(const CLI::App* app, bool default_also,
                        bool write_description,
                        std::string prefix) const override;
};

}  // namespace fedgather::server

#endif  // FEDGATHER_SERVER_YAML_CONFIG_H_
