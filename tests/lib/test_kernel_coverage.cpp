// The kernel-coverage helper's host side: kernel names from nvcc's host-stub symbols.
#include <doctest/doctest.h>

#include "wb/kernel_coverage.hpp"

TEST_CASE("the kernel behind a host-stub symbol, from the stub and from its static locals") {
  using wb::coverage::kernel_of_stub_symbol;
  // A plain kernel: the stub function and its __handle static.
  CHECK(kernel_of_stub_symbol("_Z98__device_stub__ZN4ch0451_GLOBAL__N__2e9f95a0_18_softmax_unfused_cu_2c1f8d8e14row_max_kernelEPKfPfiPKfPfi") ==
        "_ZN4ch0451_GLOBAL__N__2e9f95a0_18_softmax_unfused_cu_2c1f8d8e14row_max_kernelEPKfPfi");
  CHECK(kernel_of_stub_symbol("_ZZ98__device_stub__ZN4ch0451_GLOBAL__N__2e9f95a0_18_softmax_unfused_cu_2c1f8d8e14row_max_kernelEPKfPfiPKfPfiE8__handle") ==
        "_ZN4ch0451_GLOBAL__N__2e9f95a0_18_softmax_unfused_cu_2c1f8d8e14row_max_kernelEPKfPfi");
  // A template instantiation whose stub has internal linkage (L).
  CHECK(kernel_of_stub_symbol("_ZGVZL109__device_stub__ZN4ch0449_GLOBAL__N__ef77115c_16_softmax_fused_cu_72011a5320softmax_row_streamedILi4EEEvPKfPfiPKfPfiE5__tmp") ==
        "_ZN4ch0449_GLOBAL__N__ef77115c_16_softmax_fused_cu_72011a5320softmax_row_streamedILi4EEEvPKfPfi");
  // Anything else is not a kernel.
  CHECK(kernel_of_stub_symbol("_ZN2wb7compareEv").empty());
  CHECK(kernel_of_stub_symbol("__device_stub__Zfoo").empty());  // no length before it
  CHECK(kernel_of_stub_symbol("_Z999__device_stub__Zshort").empty());  // length past the end
}

TEST_CASE("demangled kernel names read like the source") {
  CHECK(wb::coverage::demangle("_ZN4ch0420softmax_row_streamedILi4EEEvPKfPfi") ==
        "void ch04::softmax_row_streamed<4>(float const*, float*, int)");
  CHECK(wb::coverage::demangle("not mangled") == "not mangled");
}

TEST_CASE("a host binary has no chapter kernels, and says which build it is") {
  std::string why_not;
  CHECK(wb::coverage::kernels_compiled("_ZN4ch04", &why_not).empty());
  CHECK(why_not.empty());  // the symbol table was read: there is just no kernel in it
  CHECK(wb::coverage::this_build() == "lib");  // test_host_lib
}
