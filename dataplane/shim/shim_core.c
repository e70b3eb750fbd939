/* Library identity, error text and the Internet checksum. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "shim_internal.h"

#ifndef WSGW_BUILD_FLAGS
#define WSGW_BUILD_FLAGS "unknown"
#endif
#ifndef WSGW_SOURCE_HASH
#define WSGW_SOURCE_HASH "unknown"
#endif

static __thread char last_error[512];

void wsgw_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
}

WSGW_API const char *wsgw_last_error(void) { return last_error; }
WSGW_API int wsgw_abi_version(void) { return WSGW_SHIM_ABI; }
WSGW_API const char *wsgw_shim_version(void) { return WSGW_SHIM_VERSION; }
WSGW_API const char *wsgw_build_flags(void) { return WSGW_BUILD_FLAGS; }
WSGW_API const char *wsgw_source_hash(void) { return WSGW_SOURCE_HASH; }

/* RFC 1071 section 4.1, summed 32 bits at a time into a 64-bit accumulator: the carries
 * collect in the upper half and are folded once at the end. */
WSGW_API uint32_t wsgw_csum_partial(const void *buf, size_t len, uint32_t sum)
{
    const uint8_t *p = buf;
    uint64_t acc = sum;
    while (len >= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        acc += w;
        p += 4;
        len -= 4;
    }
    if (len >= 2) {
        uint16_t h;
        memcpy(&h, p, 2);
        acc += h;
        p += 2;
        len -= 2;
    }
    if (len) {
        /* The odd byte is the high-order byte of a 16-bit word in network order. */
        uint16_t h = 0;
        memcpy(&h, p, 1);
        acc += h;
    }
    while (acc >> 32)
        acc = (acc & 0xffffffffu) + (acc >> 32);
    return (uint32_t)acc;
}

WSGW_API uint16_t wsgw_csum_fold(uint32_t sum)
{
    sum = (sum & 0xffffu) + (sum >> 16);
    sum = (sum & 0xffffu) + (sum >> 16);
    return (uint16_t)~sum;
}
