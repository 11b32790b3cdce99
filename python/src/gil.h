// WithoutGil: how the extension's destructors wait. A destructor that Python
// runs (an object's last reference dropped, dist.destroy_process_group)
// holds the GIL; one that runs from C++ (a thread that drops the last
// shared_ptr) may not. Either way, joining a thread that may touch Python
// objects (destroying a tensor whose PyObject its TensorImpl owns takes the
// GIL; a Future callback from Python takes it) must not hold it, or both
// wait forever. See docs/threading.md ("Python").
#ifndef FEDGATHER_PYTHON_SRC_GIL_H_
#define FEDGATHER_PYTHON_SRC_GIL_H_

#include <pybind11/pybind11.h>

namespace fedgather::python {

// WithoutGil runs `fn` with the GIL released when this thread holds it, and
// as it is otherwise (a C++ thread, or an interpreter already finalized).
template <typename Fn>
void WithoutGil(Fn&& fn) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release release;
    fn();
  } else {
    fn();
  }
}

}  // namespace fedgather::python

#endif  // FEDGATHER_PYTHON_SRC_GIL_H_
