// TsanHandOff and TsanTakeOver tell ThreadSanitizer about the ordering gRPC
// guarantees between a reactor's call into gRPC (StartCall, StartRead,
// StartWrite, Finish) and the callback gRPC later runs for it on another
// thread (OnReadDone, OnWriteDone, OnCancel, OnDone). gRPC provides that
// ordering inside its libraries, which Debian builds without TSan, so TSan
// cannot see it and would report every field a reactor sets before a call
// and reads in the callback (docs/testing.md). A reactor hands off before
// each call and takes over at the top of each callback; both name the
// reactor. In builds without TSan they do nothing.
#ifndef FEDGATHER_COMMON_TSAN_HANDOFF_H_
#define FEDGATHER_COMMON_TSAN_HANDOFF_H_

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FEDGATHER_TSAN 1
#endif
#endif

#ifdef FEDGATHER_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace fedgather {

inline void TsanHandOff(const void* reactor) {
#ifdef FEDGATHER_TSAN
  __tsan_release(const_cast<void*>(reactor));
#else
  (void)reactor;
#endif
}

inline void TsanTakeOver(const void* reactor) {
#ifdef FEDGATHER_TSAN
  __tsan_acquire(const_cast<void*>(reactor));
#else
  (void)reactor;
#endif
}

}  // namespace fedgather

#endif  // FEDGATHER_COMMON_TSAN_HANDOFF_H_
