// The NCCL module: libfedgather_nccl.so, a shared object that holds
// NcclLocalCollective and is the only part of the fedgather CLI that needs
// NCCL (libnccl.so.2) and the CUDA runtime (libcudart.so.13). The CLI loads
// it at run time (nccl_module_loader.h), and only for `join --gpus` on real
// GPUs, so that it starts, and every other command runs, on a host without
// NCCL, CUDA or a driver.
//
// This header is the contract between a module (nccl_module.cc) and its
// loader: the file's name, the two C symbols a module exports and what they
// do. What crosses it is C++ (LocalCollective, absl::Status), so a module
// works only with the build of fedgather it came from: the loader refuses a
// module whose ABI key (fedgather/config.h's FEDGATHER_NCCL_MODULE_ABI: our
// version, the compiler, the C++ standard, Abseil's version and a digest of
// this header and local_collective.h) is not its own. Collectives a module made
// run its code, so a loaded module is never unloaded.
#ifndef FEDGATHER_CLIENT_NCCL_NCCL_MODULE_H_
#define FEDGATHER_CLIENT_NCCL_NCCL_MODULE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client/nccl/local_collective.h"

// What a module exports; everything else in it is hidden.
#define FEDGATHER_NCCL_MODULE_EXPORT __attribute__((visibility("default")))

namespace fedgather {

// The module's file name; the loader looks for it next to the executable.
inline constexpr char kNcclModuleFile[] = "libfedgather_nccl.so";
// The environment variable that names another path for it.
inline constexpr char kNcclModuleEnv[] = "FEDGATHER_NCCL_MODULE";

using LocalCollectiveOrError = absl::StatusOr<std::unique_ptr<LocalCollective>>;

}  // namespace fedgather

extern "C" {

// fedgather_nccl_module_abi returns the ABI key the module was built with
// (a NUL-terminated string it owns).
using FedgatherNcclModuleAbiFn = const char* (*)();
inline constexpr char kFedgatherNcclModuleAbiSymbol[] =
    "fedgather_nccl_module_abi";
FEDGATHER_NCCL_MODULE_EXPORT const char* fedgather_nccl_module_abi();

// fedgather_nccl_module_create sets *out to an NcclLocalCollective over the
// `count` CUDA ordinals at `cuda_devices` (local device g is
// cuda_devices[g]), or to the error of NcclLocalCollective::Create. It
// blocks while NCCL initializes.
using FedgatherNcclModuleCreateFn = void (*)(
    const int* cuda_devices, int count, fedgather::LocalCollectiveOrError* out);
inline constexpr char kFedgatherNcclModuleCreateSymbol[] =
    "fedgather_nccl_module_create";
FEDGATHER_NCCL_MODULE_EXPORT void fedgather_nccl_module_create(
    const int* cuda_devices, int count, fedgather::LocalCollectiveOrError* out);

}  // extern "C"

#endif  // FEDGATHER_CLIENT_NCCL_NCCL_MODULE_H_
