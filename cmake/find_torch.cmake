# Which torch the build uses: the one SHAPEJIT_PYTHON imports. pip's torch wheel carries libtorch,
# its headers and CMake files, so the C++ oracle tests, the ATen benchmark rows and the PyTorch
# extension all build against the torch users run (pip torch 2.x, with FBGEMM), and the Python
# tests run in the same interpreter. tools/python_env.sh makes such an interpreter (build-venv/).
#
# SHAPEJIT_PYTHON defaults to build-venv/bin/python when that exists, else python3 on PATH. Its
# torch directory goes on CMAKE_PREFIX_PATH twice: share/cmake for TorchConfig.cmake, and the
# directory itself, because TorchConfig's find_library calls would otherwise take a system
# libtorch (Debian's libtorch-dev, /usr/lib) before the wheel's lib/ and mix two torches in one
# process.
if(CMAKE_CROSSCOMPILING)
  return()  # a host interpreter's torch cannot serve a cross build
endif()
if(EXISTS ${PROJECT_SOURCE_DIR}/build-venv/bin/python)
  set(shapejit_default_python ${PROJECT_SOURCE_DIR}/build-venv/bin/python)
else()
  find_program(shapejit_default_python NAMES python3)
endif()
set(SHAPEJIT_PYTHON "${shapejit_default_python}" CACHE FILEPATH
    "Python interpreter whose torch the build uses and which runs the Python tests (tools/python_env.sh)")

set(SHAPEJIT_TORCH_DIR "")
if(SHAPEJIT_PYTHON)
  execute_process(
    COMMAND ${SHAPEJIT_PYTHON} -c "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__)"
    RESULT_VARIABLE shapejit_torch_status OUTPUT_VARIABLE shapejit_torch_out ERROR_QUIET
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(shapejit_torch_status EQUAL 0)
    string(REPLACE "\n" ";" shapejit_torch_out "${shapejit_torch_out}")
    list(GET shapejit_torch_out 0 SHAPEJIT_TORCH_DIR)
    list(GET shapejit_torch_out 1 SHAPEJIT_TORCH_VERSION)
    list(PREPEND CMAKE_PREFIX_PATH "${SHAPEJIT_TORCH_DIR}/share/cmake" "${SHAPEJIT_TORCH_DIR}")
    message(STATUS "torch ${SHAPEJIT_TORCH_VERSION} of ${SHAPEJIT_PYTHON}: ${SHAPEJIT_TORCH_DIR}")
  else()
    message(STATUS "${SHAPEJIT_PYTHON} cannot import torch: no PyTorch oracle, ATen rows or extension "
                   "(tools/python_env.sh makes build-venv/ with pip's torch)")
  endif()
endif()
find_package(Torch CONFIG QUIET)
if(Torch_FOUND AND SHAPEJIT_TORCH_DIR)
  # The libraries must be the interpreter's: a CMake cache from before may name others.
  foreach(lib IN LISTS TORCH_LIBRARIES)
    if(lib MATCHES "^/" AND NOT lib MATCHES "^${SHAPEJIT_TORCH_DIR}/")
      message(FATAL_ERROR "libtorch library ${lib} is not ${SHAPEJIT_PYTHON}'s torch (${SHAPEJIT_TORCH_DIR}): "
                          "delete the CMake cache and configure again")
    endif()
  endforeach()
endif()
