// The NCCL module's loader (client/nccl/nccl_module_loader.h), against the
// stand-in modules of fake_nccl_module.cc: where it looks, what it passes a
// module, and each way a module can fail to load, each with its reason.
#include "client/nccl/nccl_module_loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "fedgather/config.h"
#include "tests/client/nccl/fake_nccl_modules.h"

namespace fedgather::testing {
namespace {

using ::testing::HasSubstr;

TEST(NcclModulePathTest, NextToTheExecutableUnlessTheEnvironmentNamesOne) {
  const std::string beside = NextToThisTest("libfedgather_nccl.so");
  ASSERT_EQ(unsetenv("FEDGATHER_NCCL_MODULE"), 0);
  EXPECT_EQ(NcclModulePath(), beside);
  ASSERT_EQ(setenv("FEDGATHER_NCCL_MODULE", "", 1), 0);
  EXPECT_EQ(NcclModulePath(), beside);
  ASSERT_EQ(setenv("FEDGATHER_NCCL_MODULE", "/opt/gpu/module.so", 1), 0);
  EXPECT_EQ(NcclModulePath(), "/opt/gpu/module.so");
  ASSERT_EQ(unsetenv("FEDGATHER_NCCL_MODULE"), 0);
}

TEST(LoadNcclLocalCollectiveTest, AModuleMakesACollectiveOverTheDevicesAsked) {
  LocalCollectiveOrError local =
      LoadNcclLocalCollective(NextToThisTest(kFakeNcclModule), {0, 1, 2});
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ((*local)->device_count(), 3);
  // Usable: memory on its last device, released before the collective.
  absl::StatusOr<LocalBuffer> buffer = (*local)->AllocateDevice(2, 64);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(buffer->device(), 2);
  *buffer = LocalBuffer();

  // The device list reaches the module as given, and its error comes back
  // as it made it.
  const LocalCollectiveOrError refused =
      LoadNcclLocalCollective(NextToThisTest(kFakeNcclModule), {0, 5});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "fake NCCL module: CUDA devices [0, 5]");
}

TEST(LoadNcclLocalCollectiveTest, NoFileSaysWhereTheModuleComesFrom) {
  const LocalCollectiveOrError local =
      LoadNcclLocalCollective("/nonexistent/libfedgather_nccl.so", {0});
  EXPECT_EQ(local.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(local.status().message()),
              HasSubstr("no NCCL module at /nonexistent/libfedgather_nccl.so: "
                        "No such file or directory"));
#if FEDGATHER_HAVE_NCCL
  EXPECT_THAT(std::string(local.status().message()),
              HasSubstr("set FEDGATHER_NCCL_MODULE to its path"));
#else
  EXPECT_THAT(std::string(local.status().message()),
              HasSubstr("built without NCCL"));
#endif
}

TEST(LoadNcclLocalCollectiveTest,
     AMissingLibraryIsNamedWithWhatTheModuleNeeds) {
  const LocalCollectiveOrError local = LoadNcclLocalCollective(
      NextToThisTest(kFakeNcclModuleNeedingAbsent), {0});
  EXPECT_EQ(local.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(local.status().message());
  EXPECT_THAT(message, HasSubstr(absl::StrCat(
                           "the NCCL module ",
                           NextToThisTest(kFakeNcclModuleNeedingAbsent),
                           " does not load: ")));
  EXPECT_THAT(message, HasSubstr("libfg_test_absent_library.so: cannot open "
                                 "shared object file"));
  EXPECT_THAT(message, HasSubstr("it needs NCCL, libnccl.so.2, and the CUDA "
                                 "runtime, libcudart.so.13"));
}

TEST(LoadNcclLocalCollectiveTest, ASharedObjectWithoutTheSymbolsIsNoModule) {
  const LocalCollectiveOrError local =
      LoadNcclLocalCollective(NextToThisTest(kAbsentLibrary), {0});
  EXPECT_EQ(local.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(local.status().message()),
              HasSubstr(absl::StrCat(NextToThisTest(kAbsentLibrary),
                                     " is not a fedgather NCCL module: ")));
  EXPECT_THAT(std::string(local.status().message()),
              HasSubstr("undefined symbol: fedgather_nccl_module_"));
}

TEST(LoadNcclLocalCollectiveTest, AModuleOfAnotherBuildIsRefused) {
  const LocalCollectiveOrError local = LoadNcclLocalCollective(
      NextToThisTest(kFakeNcclModuleOfAnotherBuild), {0});
  EXPECT_EQ(local.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(local.status().message()),
      HasSubstr(absl::StrCat(
          " was built for \"fedgather 0.0.1, another build\", and "
          "this fedgather is \"",
          FEDGATHER_NCCL_MODULE_ABI, "\": use the module built with it")));
}

}  // namespace
}  // namespace fedgather::testing
