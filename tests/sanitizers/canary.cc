// Canaries for the sanitizer builds: each mode runs one deliberate bug that
// its sanitizer must report (tests/sanitizers/CMakeLists.txt checks the
// report). A sanitizer run of the suite that passes then proves something:
// the runtime was loaded, its options do not silence our code, and no
// suppression hides a plain bug.
//
//   sanitizer_canary race      two threads write one int with no ordering
//   sanitizer_canary overflow  reads one byte past a heap block
//   sanitizer_canary signed    overflows a signed int
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

int Race() {
  int shared = 0;
  std::thread writer([&shared] { shared = 1; });
  shared = 2;
  writer.join();
  return shared;
}

// UBSan's object-size check would report this first; this canary is ASan's.
__attribute__((no_sanitize("object-size"))) int Overflow(int past) {
  char* block = static_cast<char*>(std::malloc(16));
  std::memset(block, 1, 16);
  const int byte = block[15 + past];
  std::free(block);
  return byte;
}

int SignedOverflow(int by) {
  int big = 2147483647;
  return big + by;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s race|overflow|signed\n", argv[0]);
    return 2;
  }
  // argc keeps the compiler from proving the bugs away.
  if (std::strcmp(argv[1], "race") == 0) return Race();
  if (std::strcmp(argv[1], "overflow") == 0) return Overflow(argc - 1);
  if (std::strcmp(argv[1], "signed") == 0) return SignedOverflow(argc - 1);
  std::fprintf(stderr, "unknown canary %s\n", argv[1]);
  return 2;
}
