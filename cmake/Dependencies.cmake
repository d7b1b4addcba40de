# Header-only dependencies: the system package first (Debian: doctest-dev, libcli11-dev,
# nlohmann-json3-dev), then ${PROJECT_SOURCE_DIR}/.deps/include (carried to machines that
# cannot install anything), then a FetchContent download when online.
include(FetchContent)

function(wb_header_dependency target header url)
  find_path(_inc NAMES ${header}
            HINTS ${PROJECT_SOURCE_DIR}/.deps/include
            PATHS /usr/include /usr/local/include NO_CACHE)
  if(NOT _inc)
    message(STATUS "workbook: ${header} not found on this machine; downloading ${url}")
    string(MAKE_C_IDENTIFIER ${target} _name)
    FetchContent_Declare(${_name} URL ${url})
    FetchContent_MakeAvailable(${_name})
    set(_inc ${${_name}_SOURCE_DIR}/include)
    if(NOT EXISTS ${_inc}/${header})
      set(_inc ${${_name}_SOURCE_DIR})
    endif()
  endif()
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  target_include_directories(${target} SYSTEM INTERFACE ${_inc})
  message(STATUS "workbook: ${header} from ${_inc}")
endfunction()

wb_header_dependency(wb::doctest doctest/doctest.h
  https://github.com/doctest/doctest/archive/refs/tags/v2.4.11.tar.gz)
wb_header_dependency(wb::cli11 CLI/CLI.hpp
  https://github.com/CLIUtils/CLI11/archive/refs/tags/v2.4.2.tar.gz)
wb_header_dependency(wb::json nlohmann/json.hpp
  https://github.com/nlohmann/json/archive/refs/tags/v3.11.3.tar.gz)

find_package(CUDAToolkit REQUIRED)
find_package(OpenMP COMPONENTS CXX)

# libarchive reads submitted zip and tar archives (Debian: libarchive-dev). A GPU machine
# with only the runtime libraries gets archive.h and libarchive.so from a carried .deps/.
find_path(WB_ARCHIVE_INCLUDE_DIR NAMES archive.h HINTS ${PROJECT_SOURCE_DIR}/.deps/include)
find_library(WB_ARCHIVE_LIBRARY NAMES archive HINTS ${PROJECT_SOURCE_DIR}/.deps/lib)
if(NOT WB_ARCHIVE_INCLUDE_DIR OR NOT WB_ARCHIVE_LIBRARY)
  message(FATAL_ERROR "workbook: libarchive not found (archive.h, libarchive.so). "
                      "Install it (Debian: apt-get install libarchive-dev) or put it in .deps/.")
endif()
add_library(wb::archive UNKNOWN IMPORTED GLOBAL)
set_target_properties(wb::archive PROPERTIES IMPORTED_LOCATION ${WB_ARCHIVE_LIBRARY}
                      INTERFACE_INCLUDE_DIRECTORIES ${WB_ARCHIVE_INCLUDE_DIR})
message(STATUS "workbook: libarchive ${WB_ARCHIVE_LIBRARY}")
