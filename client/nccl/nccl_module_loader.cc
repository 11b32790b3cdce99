#include "client/nccl/nccl_module_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "fedgather/config.h"

namespace fedgather {
namespace {

// WhereModulesComeFrom is the hint for a path that holds no module.
std::string WhereModulesComeFrom() {
#if FEDGATHER_HAVE_NCCL
  return absl::StrCat("the build puts ", kNcclModuleFile,
                      " next to fedgather; set ", kNcclModuleEnv,
                      " to its path if it is elsewhere");
#else
  return absl::StrCat(
      "this fedgather was built without NCCL (FEDGATHER_WITH_NCCL), so it "
      "has no module; a build with NCCL puts ",
      kNcclModuleFile, " next to fedgather");
#endif
}

std::string DlError() {
  const char* error = dlerror();
  return error != nullptr ? error : "no reason given";
}

}  // namespace

std::string NcclModulePath() {
  const char* from_env = std::getenv(kNcclModuleEnv);
  if (from_env != nullptr && from_env[0] != '\0') return from_env;
  std::error_code error;
  const std::filesystem::path exe =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return kNcclModuleFile;  // the dynamic linker's search path
  return (exe.parent_path() / kNcclModuleFile).string();
}

LocalCollectiveOrError LoadNcclLocalCollective(
    const std::string& module_path, const std::vector<int>& cuda_devices) {
  struct stat file;
  if (module_path.find('/') != std::string::npos &&
      stat(module_path.c_str(), &file) != 0) {
    const std::string why = std::strerror(errno);
    return absl::FailedPreconditionError(
        absl::StrCat("no NCCL module at ", module_path, ": ", why, "; ",
                     WhereModulesComeFrom()));
  }
  void* module = dlopen(module_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the NCCL module ", module_path, " does not load: ", DlError(),
        " (it needs NCCL, libnccl.so.2, and the CUDA runtime, "
        "libcudart.so.13, where the dynamic linker finds them: "
        "LD_LIBRARY_PATH or ldconfig)"));
  }
  // The first symbol not found, with dlerror's reason (read at once: the
  // next dlsym may reset it).
  std::string missing;
  const auto symbol = [&](const char* name) {
    void* found = dlsym(module, name);
    if (found == nullptr && missing.empty()) missing = DlError();
    return found;
  };
  const auto abi = reinterpret_cast<FedgatherNcclModuleAbiFn>(
      symbol(kFedgatherNcclModuleAbiSymbol));
  const auto create = reinterpret_cast<FedgatherNcclModuleCreateFn>(
      symbol(kFedgatherNcclModuleCreateSymbol));
  if (abi == nullptr || create == nullptr) {
    dlclose(module);
    return absl::FailedPreconditionError(absl::StrCat(
        module_path, " is not a fedgather NCCL module: ", missing));
  }
  const std::string module_abi = abi();
  if (module_abi != FEDGATHER_NCCL_MODULE_ABI) {
    dlclose(module);
    return absl::FailedPreconditionError(absl::StrCat(
        "the NCCL module ", module_path, " was built for \"", module_abi,
        "\", and this fedgather is \"", FEDGATHER_NCCL_MODULE_ABI,
        "\": use the module built with it"));
  }
  LocalCollectiveOrError local =
      absl::UnknownError("the NCCL module returned nothing");
  create(cuda_devices.data(), static_cast<int>(cuda_devices.size()), &local);
  return local;
}

}  // namespace fedgather
