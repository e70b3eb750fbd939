#ifndef WSGW_SHIM_INTERNAL_H
#define WSGW_SHIM_INTERNAL_H
#include "wsgw_shim.h"

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

__attribute__((format(printf, 1, 2))) void wsgw_set_error(const char *fmt, ...);

/* A hex digit's value, -1 for anything else (JSON \uXXXX escapes). */
static inline int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}
#ifdef WSGW_HAVE_DPDK
#include <rte_dev.h>
#include <rte_mempool.h>

#define BURST_MAX 64

/* A DPDK port as the shim owns it; shared by shim_port.c and the engine. */
struct wsgw_port {
    uint16_t port_id;
    int started;
    int probed;                 /* we hot-plugged the device: remove it on close */
    char devname[RTE_DEV_NAME_MAX_LEN];
    struct rte_mempool *pool;
    uint16_t data_room;
    uint16_t link_mtu;          /* != 0: the MTU the link has where ethdev cannot tell it */
    /* shim-side counters, summed with the PMD's in wsgw_port_stats */
    uint64_t tx_dropped, tx_nombuf, tx_oversize, rx_truncated;
};
#endif

#endif
