// GYRE_API: marks what libgyre.so exports, i.e. the public C++ API.
//
// Contract: the library is compiled with -fvisibility=hidden (cmake/gyre_install.cmake),
// so a symbol is in libgyre.so's dynamic table only when its declaration carries
// GYRE_API: the classes and functions a user of the public headers (ring/communicator.h,
// ring/work.h, ring/spawn.h, ring/options.h, store/store.h, store/tcp_store.h, base/error.h,
// base/options.h, base/types.h, base/log.h) calls, directly or through their inline
// code. Everything else (transports, schedules, the communicator's Impl) stays private
// to the library, so it can change without breaking programs linked against it. The
// static libraries use the same objects; for them the attribute changes nothing.
// A new public function or class: mark it GYRE_API and add it to the allow-list in
// tests/install_consumer/run_test.sh, which fails on any export it does not list.
// Plain preprocessor, no dependencies: safe to include from any layer and from CUDA.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define GYRE_API __attribute__((visibility("default")))
#define GYRE_HIDDEN __attribute__((visibility("hidden")))
#else
#define GYRE_API
#define GYRE_HIDDEN
#endif
