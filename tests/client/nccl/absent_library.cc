// fg_test_absent_library: a shared library that one fake NCCL module needs
// and its loader cannot find (tests/client/nccl/CMakeLists.txt), as the real
// module needs libnccl.so.2 on a host without it.
int FgTestAbsentLibraryAnswer() { return 42; }
