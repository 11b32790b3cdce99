#include "server/yaml_config.h"

#include <yaml-cpp/yaml.h>

#include <sstream>

namespace fedgather::server {

std::vector<CLI::ConfigItem> YamlConfig::from_config(
    std::istream& input) const {
  YAML::Node root;
  try {
    root = YAML::Load(input);
  } catch (const YAML::Exception& e) {
    throw CLI::ConversionError("--config: not YAML: " + e.msg + " (line " +
                               std::to_string(e.mark.line + 1) + ")");
  }
  std::vector<CLI::ConfigItem> items;
  if (root.IsNull()) return items;  // an empty file sets nothing
  if (!root.IsMap()) {
    throw CLI::ConversionError(
        "--config: the file must be a map of flag names to values");
  }
  for (const auto& entry : root) {
    CLI::ConfigItem item;
    item.name = entry.first.as<std::string>();
    const YAML::Node& value = entry.second;
    if (value.IsScalar()) {
      item.inputs.push_back(value.as<std::string>());
    } else if (value.IsSequence()) {
      for (const YAML::Node& element : value) {
        if (!element.IsScalar()) {
          throw CLI::ConversionError("--config: '" + item.name +
                                     "' must be a value or a list of values");
        }
        item.inputs.push_back(element.as<std::string>());
      }
    } else {
      throw CLI::ConversionError("--config: '" + item.name +
                                 "' must be a value or a list of values");
    }
    items.push_back(std::move(item));
  }
  return items;
}

std::string YamlConfig::to_config(const CLI::App* app, bool default_also,
                                  bool write_description,
                                  std::string prefix) const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const CLI::Option* option : app->get_options()) {
    if (option->get_lnames().empty() || !option->get_configurable()) continue;
    std::vector<std::string> values = option->results();
    if (values.empty() && default_also && !option->get_default_str().empty()) {
      values.push_back(option->get_default_str());
    }
    if (values.empty()) continue;
    out << YAML::Key << option->get_lnames().front() << YAML::Value;
    if (values.size() == 1) {
      out << values.front();
    } else {
      out << YAML::Flow << values;
    }
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace fedgather::server
