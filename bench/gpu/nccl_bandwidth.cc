// nccl_bandwidth: what the hand-off's two device steps cost on this node's
// GPUs, measured through NcclLocalCollective (the code the hand-off runs):
//   h2d_pinned    one copy per GPU at once from pinned host memory
//   h2d_pageable  the same from ordinary (pageable) host memory
//   d2h_pinned    one copy per GPU at once to pinned host memory
//   all_gather    ncclAllGather across the GPUs, in place; algbw counts the
//                 gathered bytes per GPU, busbw = algbw * (G-1)/G as in
//                 nccl-tests' doc/PERFORMANCE.md (0 for one GPU: no link)
// Prints CSV: op,gpus,bytes,iterations,seconds_per_op,gb_per_s_per_gpu,busbw.
// Used by bench/gpu/device_check.sh. Exits 1 with the error on failure.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "client/nccl/nccl_local_collective.h"
#include "common/status_macros.h"

namespace fedgather {
namespace {

struct Row {
  const char* op;
  int gpus;
  int64_t bytes;
  int iterations;
  double seconds;
  double busbw;
};

void Print(const Row& row) {
  const double per_gpu = row.bytes / row.seconds / 1e9;
  std::printf("%s,%d,%lld,%d,%.6f,%.2f,%.2f\n", row.op, row.gpus,
              static_cast<long long>(row.bytes), row.iterations, row.seconds,
              per_gpu, row.busbw);
  std::fflush(stdout);
}

// Time runs `enqueue` (one operation on every GPU) `iterations` times after
// two warm-ups and returns the seconds per operation.
absl::StatusOr<double> Time(LocalCollective& local, int iterations,
                            const std::function<absl::Status()>& enqueue) {
  for (int i = 0; i < 2; ++i) FG_RETURN_IF_ERROR(enqueue());
  FG_RETURN_IF_ERROR(local.Synchronize());
  const absl::Time start = absl::Now();
  for (int i = 0; i < iterations; ++i) FG_RETURN_IF_ERROR(enqueue());
  FG_RETURN_IF_ERROR(local.Synchronize());
  return absl::ToDoubleSeconds(absl::Now() - start) / iterations;
}

absl::Status Measure(int64_t max_bytes) {
  FG_ASSIGN_OR_RETURN(std::unique_ptr<NcclLocalCollective> local,
                      NcclLocalCollective::Create());
  const int gpus = local->device_count();
  std::printf(
      "op,gpus,bytes,iterations,seconds_per_op,gb_per_s_per_gpu,busbw\n");
  for (int64_t bytes = 1 << 20; bytes <= max_bytes; bytes *= 16) {
    const int iterations = bytes >= (256 << 20) ? 5 : 20;
    std::vector<LocalBuffer> device;
    for (int g = 0; g < gpus; ++g) {
      FG_ASSIGN_OR_RETURN(LocalBuffer b,
                          local->AllocateDevice(g, bytes * gpus));
      device.push_back(std::move(b));
    }
    FG_ASSIGN_OR_RETURN(LocalBuffer pinned, local->AllocateHost(bytes * gpus));
    std::memset(pinned.data(), 1, static_cast<size_t>(bytes * gpus));
    std::vector<uint8_t> pageable(static_cast<size_t>(bytes * gpus), 2);
    auto copies = [&](bool to_device, const uint8_t* host_src,
                      uint8_t* host_dst) {
      return [&, to_device, host_src, host_dst]() -> absl::Status {
        for (int g = 0; g < gpus; ++g) {
          FG_RETURN_IF_ERROR(
              to_device ? local->CopyToDevice(g, device[g].data(),
                                              host_src + g * bytes, bytes)
                        : local->CopyToHost(g, host_dst + g * bytes,
                                            device[g].data(), bytes));
        }
        return absl::OkStatus();
      };
    };
    FG_ASSIGN_OR_RETURN(
        double s,
        Time(*local, iterations, copies(true, pinned.bytes_data(), nullptr)));
    Print({"h2d_pinned", gpus, bytes, iterations, s, 0});
    FG_ASSIGN_OR_RETURN(
        s, Time(*local, iterations, copies(true, pageable.data(), nullptr)));
    Print({"h2d_pageable", gpus, bytes, iterations, s, 0});
    FG_ASSIGN_OR_RETURN(s, Time(*local, iterations,
                                copies(false, nullptr, pinned.bytes_data())));
    Print({"d2h_pinned", gpus, bytes, iterations, s, 0});
    LocalAllGather op;
    op.bytes = bytes;
    for (int g = 0; g < gpus; ++g) {
      op.sends.push_back(device[g].bytes_data() + g * bytes);
      op.recvs.push_back(device[g].data());
    }
    FG_ASSIGN_OR_RETURN(s, Time(*local, iterations, [&] {
                          return local->AllGather({&op, 1});
                        }));
    const double algbw = static_cast<double>(bytes) * gpus / s / 1e9;
    Print({"all_gather", gpus, bytes * gpus, iterations, s,
           algbw * (gpus - 1) / gpus});
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace fedgather

int main(int argc, char** argv) {
  int64_t max_mib = 256;
  if (argc > 1 && !absl::SimpleAtoi(argv[1], &max_mib)) {
    std::fprintf(stderr, "usage: nccl_bandwidth [MAX_MIB (default 256)]\n");
    return 2;
  }
  const absl::Status status = fedgather::Measure(max_mib << 20);
  if (!status.ok()) {
    std::fprintf(stderr, "nccl_bandwidth: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
