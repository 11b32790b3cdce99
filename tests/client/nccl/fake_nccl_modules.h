// The stand-in NCCL modules (fake_nccl_module.cc) and the library one of
// them lacks, as the tests find them: next to the test binary, where the
// build (tests/client/nccl/CMakeLists.txt) and the GPU bundle put them.
#ifndef FEDGATHER_TESTS_CLIENT_NCCL_FAKE_NCCL_MODULES_H_
#define FEDGATHER_TESTS_CLIENT_NCCL_FAKE_NCCL_MODULES_H_

#include <filesystem>
#include <string>

namespace fedgather::testing {

// Loads; CpuLocalCollective over devices 0..G-1.
inline constexpr char kFakeNcclModule[] = "libfg_test_fake_nccl_module.so";
// Loads, with an ABI key that is not this build's.
inline constexpr char kFakeNcclModuleOfAnotherBuild[] =
    "libfg_test_fake_nccl_module_of_another_build.so";
// Needs kAbsentLibrary, which the dynamic linker cannot find.
inline constexpr char kFakeNcclModuleNeedingAbsent[] =
    "libfg_test_fake_nccl_module_needing_absent.so";
// A shared object without the module's symbols.
inline constexpr char kAbsentLibrary[] = "absent/libfg_test_absent_library.so";

// NextToThisTest is `file` in the folder of the running test binary.
inline std::string NextToThisTest(const std::string& file) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / file)
      .string();
}

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_CLIENT_NCCL_FAKE_NCCL_MODULES_H_
