// Loading the NCCL module (nccl_module.h) at run time: how the fedgather CLI
// gets an NcclLocalCollective without linking NCCL or the CUDA runtime. Part
// of fg_local_collective, so it builds, and says why it cannot load a
// module, in every build, with or without NCCL.
#ifndef FEDGATHER_CLIENT_NCCL_NCCL_MODULE_LOADER_H_
#define FEDGATHER_CLIENT_NCCL_NCCL_MODULE_LOADER_H_

#include <string>
#include <vector>

#include "client/nccl/nccl_module.h"

namespace fedgather {

// NcclModulePath is where the module is looked for: the path in
// $FEDGATHER_NCCL_MODULE when it is set and not empty, else
// libfedgather_nccl.so in the folder of the running executable
// (/proc/self/exe), where the build and the GPU bundle put it.
std::string NcclModulePath();

// LoadNcclLocalCollective loads the module at `module_path` (dlopen; a
// module once loaded stays loaded) and creates an NcclLocalCollective over
// `cuda_devices` with it. FAILED_PRECONDITION, naming the path, when there
// is no file there (and whether this build has a module at all), when it
// does not load (the dynamic linker's reason: typically libnccl.so.2 or
// libcudart.so.13 not found), when it lacks the module's symbols, or when
// its ABI key is not this build's; otherwise what NcclLocalCollective::Create
// returns (UNAVAILABLE without a GPU, INVALID_ARGUMENT for a bad ordinal).
LocalCollectiveOrError LoadNcclLocalCollective(
    const std::string& module_path, const std::vector<int>& cuda_devices);

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_NCCL_NCCL_MODULE_LOADER_H_
