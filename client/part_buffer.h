// PartBuffer: memory for one received part of a variable-size gather
// (ALL_GATHER_V, ALL_GATHER_BYTES), allocated when the part's header
// arrives and left uninitialized. A header declares the part's size, but
// only the chunks that arrive are written: a large allocation is mapped
// lazily by the kernel, so a part costs resident memory only as its bytes
// come. A peer that declares a huge part and sends little (a fault case of
// tests/faults) thus makes no receiver fill the declared size with zeros.
// The server has already checked the size against the sender's
// max_contribution_bytes.
#ifndef FEDGATHER_CLIENT_PART_BUFFER_H_
#define FEDGATHER_CLIENT_PART_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace fedgather {

class PartBuffer {
 public:
  // Allocate replaces the buffer with `size` uninitialized bytes; returns
  // them.
  uint8_t* Allocate(size_t size) {
    data_.reset(new uint8_t[size]);  // default-initialized: not zeroed
    size_ = size;
    return data_.get();
  }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
};

}  // namespace fedgather

#endif  // FEDGATHER_CLIENT_PART_BUFFER_H_
