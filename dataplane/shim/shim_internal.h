#ifndef WSGW_SHIM_INTERNAL_H
#define WSGW_SHIM_INTERNAL_H
#include "wsgw_shim.h"

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

__attribute__((format(printf, 1, 2))) void wsgw_set_error(const char *fmt, ...);
#endif
