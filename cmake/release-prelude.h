// Included before every C++ file of the release build (cmake/release-toolchain.cmake).
//
// The sysroot's libstdc++ (GCC 10) was configured on glibc 2.31, which has
// pthread_cond_clockwait, pthread_mutex_clocklock and pthread_rwlock_clock*lock
// (new in glibc 2.30), so its headers call them inline: std::condition_variable's
// wait_until on the steady clock would make the binary need glibc 2.30, more than
// the 2.28 of RHEL 8. Without them libstdc++ waits with pthread_cond_timedwait on
// the system clock, converting the deadline: the same, unless the wall clock is
// stepped back during a wait, which then lasts longer by the step.
#pragma once

#include <bits/c++config.h>

#undef _GLIBCXX_USE_PTHREAD_COND_CLOCKWAIT
#undef _GLIBCXX_USE_PTHREAD_MUTEX_CLOCKLOCK
#undef _GLIBCXX_USE_PTHREAD_RWLOCK_CLOCKLOCK

// std::bit_cast is C++20, but reached libstdc++ only in GCC 11; clang has the
// builtin that libstdc++ makes it of.
#include <bit>
#if !defined(__cpp_lib_bit_cast)
namespace std {
template <class To, class From>
constexpr To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From), "bit_cast between types of different sizes");
  return __builtin_bit_cast(To, from);
}
}  // namespace std
#endif

// Asio 1.22 looks for libc++'s <experimental/coroutine> under clang before it
// enables co_await; libstdc++'s <coroutine> serves clang 14 just as well.
#if defined(__clang__) && !defined(ASIO_HAS_CO_AWAIT)
#define ASIO_HAS_CO_AWAIT 1
#endif
