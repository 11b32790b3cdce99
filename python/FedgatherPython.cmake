# Finds what fedgather's Python module needs and sets
#   FEDGATHER_PYTHON_FOUND          TRUE when everything is there
#   FEDGATHER_PYTHON_MISSING        otherwise, what is missing (for messages)
#   FEDGATHER_TORCH_PYTHON_LIBRARY  libtorch_python
#   Python3_EXECUTABLE, Python3::Module, pybind11::module (from their packages)
# Needs find_package(Torch) to have run. The interpreter is
# FEDGATHER_PYTHON_EXECUTABLE (default /usr/bin/python3, Debian's, whose
# python3-torch is the LibTorch the rest of the build links; a pyenv or venv
# python3 first on PATH would have neither).
set(FEDGATHER_PYTHON_EXECUTABLE "/usr/bin/python3" CACHE FILEPATH
    "The Python interpreter the fedgather module is built for and tested with")

set(FEDGATHER_PYTHON_FOUND FALSE)
set(FEDGATHER_PYTHON_MISSING "")

if(NOT EXISTS "${FEDGATHER_PYTHON_EXECUTABLE}")
  set(FEDGATHER_PYTHON_MISSING "the interpreter ${FEDGATHER_PYTHON_EXECUTABLE}")
  return()
endif()
set(Python3_EXECUTABLE "${FEDGATHER_PYTHON_EXECUTABLE}")
find_package(Python3 QUIET COMPONENTS Interpreter Development.Module)
if(NOT Python3_FOUND)
  set(FEDGATHER_PYTHON_MISSING "Python 3 headers (python3-dev)")
  return()
endif()
find_package(pybind11 CONFIG QUIET)
if(NOT pybind11_FOUND)
  set(FEDGATHER_PYTHON_MISSING "pybind11 (pybind11-dev)")
  return()
endif()

# torch for that interpreter, with torch.distributed, and where its
# libtorch_cpu really is.
execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c
    "import os, torch, torch.distributed as d; assert d.is_available(); print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), 'lib', 'libtorch_cpu.so')))"
  RESULT_VARIABLE torch_import_result
  OUTPUT_VARIABLE python_torch_cpu
  ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT torch_import_result EQUAL 0)
  set(FEDGATHER_PYTHON_MISSING "torch with torch.distributed for ${Python3_EXECUTABLE} (python3-torch)")
  return()
endif()

# One extension links both the C++ LibTorch (the client's torch adapter) and
# Python's torch, so they must be the same libraries: Debian's python3-torch
# links its torch/lib to libtorch1.13, which libtorch-dev builds against.
find_library(FEDGATHER_TORCH_CPU_LIBRARY torch_cpu HINTS "${TORCH_INSTALL_PREFIX}/lib")
find_library(FEDGATHER_TORCH_PYTHON_LIBRARY torch_python HINTS "${TORCH_INSTALL_PREFIX}/lib")
find_path(FEDGATHER_C10D_INCLUDE_DIR torch/csrc/distributed/c10d/ProcessGroup.hpp
          HINTS ${TORCH_INCLUDE_DIRS})
if(NOT FEDGATHER_TORCH_PYTHON_LIBRARY OR NOT FEDGATHER_C10D_INCLUDE_DIR)
  set(FEDGATHER_PYTHON_MISSING "libtorch_python and the c10d headers (python3-torch, libtorch-dev)")
  return()
endif()
get_filename_component(cxx_torch_cpu "${FEDGATHER_TORCH_CPU_LIBRARY}" REALPATH)
if(NOT cxx_torch_cpu STREQUAL python_torch_cpu)
  set(FEDGATHER_PYTHON_MISSING
      "a python torch on the same LibTorch: ${Python3_EXECUTABLE}'s torch uses ${python_torch_cpu}, the build links ${cxx_torch_cpu}")
  return()
endif()

set(FEDGATHER_PYTHON_FOUND TRUE)
