// A stand-in for the NCCL module (client/nccl/nccl_module.h) that tests load
// where there is no GPU: it exports the module's two symbols over
// CpuLocalCollective, and refuses any device list but 0..G-1 with a message
// that echoes it, so a test sees what the loader passed. Built as
// fg_test_fake_nccl_module with this build's ABI key, and with another one
// (FAKE_NCCL_MODULE_ABI) and with a library that is not there, for the
// loader's refusals.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/nccl/cpu_local_collective.h"
#include "client/nccl/nccl_module.h"
#include "fedgather/config.h"

#ifdef FAKE_NCCL_MODULE_NEEDS_ABSENT_LIBRARY
// Defined in fg_test_absent_library, which the module's loader cannot find;
// using it makes the module need that library.
int FgTestAbsentLibraryAnswer();
[[maybe_unused]] static const int kAbsentLibraryAnswer =
    FgTestAbsentLibraryAnswer();
#endif

const char* fedgather_nccl_module_abi() {
#ifdef FAKE_NCCL_MODULE_ABI
  return FAKE_NCCL_MODULE_ABI;
#else
  return FEDGATHER_NCCL_MODULE_ABI;
#endif
}

void fedgather_nccl_module_create(const int* cuda_devices, int count,
                                  fedgather::LocalCollectiveOrError* out) {
  const std::vector<int> devices(cuda_devices, cuda_devices + count);
  bool in_order = count > 0;
  for (int g = 0; g < count; ++g) in_order = in_order && devices[g] == g;
  if (!in_order) {
    *out = absl::InvalidArgumentError(absl::StrCat(
        "fake NCCL module: CUDA devices [", absl::StrJoin(devices, ", "), "]"));
    return;
  }
  *out = std::make_unique<fedgather::CpuLocalCollective>(count);
}
