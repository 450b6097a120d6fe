# tests/install/run_install_test.cmake — CTest driver (cmake -P) for the installed package:
#   1. cmake --install BUILD_DIR into a fresh prefix under WORK_DIR;
#   2. the installed CLI answers --version;
#   3. tests/install/ configured with find_package(tfm) against that prefix, built and run;
#   4. the same consumer compiled by hand with `pkg-config --cflags --libs tfm` (no --static: a static library lists its dependencies in Libs), and run.
# Variables (-D): BUILD_DIR, SOURCE_DIR, WORK_DIR, CXX (compiler for step 4).
foreach(v BUILD_DIR SOURCE_DIR WORK_DIR CXX)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_install_test.cmake: -D${v}=... is required")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  set(LAST_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

run(${prefix}/bin/tfm --version)
message(STATUS "installed CLI: ${LAST_OUTPUT}")

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install -B ${WORK_DIR}/build -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer ${WORK_DIR}/out_cmake.safetensors)
message(STATUS "find_package consumer: ${LAST_OUTPUT}")

file(GLOB_RECURSE pc_files ${prefix}/*/tfm.pc)
list(LENGTH pc_files n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one installed tfm.pc, found: ${pc_files}")
endif()
get_filename_component(pc_dir ${pc_files} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
run(pkg-config --cflags --libs tfm)
string(STRIP "${LAST_OUTPUT}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CXX} ${SOURCE_DIR}/tests/install/consumer.cc ${flags} -o ${WORK_DIR}/consumer_pc)
run(${WORK_DIR}/consumer_pc ${WORK_DIR}/out_pc.safetensors)
message(STATUS "pkg-config consumer: ${LAST_OUTPUT}")
file(REMOVE_RECURSE ${WORK_DIR})
