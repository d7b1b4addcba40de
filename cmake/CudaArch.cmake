# Choose CMAKE_CUDA_ARCHITECTURES before project() enables CUDA.
# CMake's `native` fails hard on a machine without a GPU, so ask nvidia-smi first and fall
# back to sm_90 (the H200/H100 the reference results come from) when no GPU answers.
if(DEFINED CMAKE_CUDA_ARCHITECTURES OR DEFINED ENV{CUDAARCHS})
  return()
endif()
set(_wb_arch 90)
find_program(_wb_nvidia_smi nvidia-smi)
if(_wb_nvidia_smi)
  execute_process(COMMAND ${_wb_nvidia_smi} --query-gpu=compute_cap --format=csv,noheader
                  OUTPUT_VARIABLE _wb_cc RESULT_VARIABLE _wb_rc ERROR_QUIET
                  OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 20)
  if(_wb_rc EQUAL 0 AND _wb_cc MATCHES "^([0-9]+)\\.([0-9]+)")
    set(_wb_arch "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
  endif()
endif()
set(CMAKE_CUDA_ARCHITECTURES ${_wb_arch} CACHE STRING "CUDA architectures (detected: local GPU, else 90)")
message(STATUS "workbook: CUDA architecture ${CMAKE_CUDA_ARCHITECTURES}")
