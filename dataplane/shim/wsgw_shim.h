/* wsgw shim: the per-packet and per-byte loops of wsgw, loaded by Python through ctypes.
 *
 * Rule: per-packet, per-byte and per-message loops are C, every decision is Python.
 * Every export carries the wsgw_ prefix and WSGW_API visibility; everything else is hidden.
 * Functions that can fail return 0 or a negative errno; wsgw_last_error() gives the text.
 */
#ifndef WSGW_SHIM_H
#define WSGW_SHIM_H

#include <stddef.h>
#include <stdint.h>

#define WSGW_API __attribute__((visibility("default")))

/* Bumped on every change of an exported prototype or struct layout; the loader refuses a
 * library whose ABI differs from the one its declarations were written for. */
#define WSGW_SHIM_ABI 1
#define WSGW_SHIM_VERSION "0.1.0"

/* ---- library identity ---------------------------------------------------------------- */
WSGW_API int wsgw_abi_version(void);
WSGW_API const char *wsgw_shim_version(void);
WSGW_API int wsgw_has_dpdk(void);
WSGW_API const char *wsgw_dpdk_version(void);
WSGW_API const char *wsgw_build_flags(void);
WSGW_API const char *wsgw_source_hash(void);
WSGW_API const char *wsgw_last_error(void);

/* ---- Internet checksum (RFC 1071) ----------------------------------------------------- */
/* One's-complement sum of buf added to sum (not folded); chain calls for pseudo headers. */
WSGW_API uint32_t wsgw_csum_partial(const void *buf, size_t len, uint32_t sum);
/* Fold a partial sum to 16 bits and complement it: the value that goes on the wire. */
WSGW_API uint16_t wsgw_csum_fold(uint32_t sum);

/* ---- DPDK environment (EAL) ----------------------------------------------------------- */
enum wsgw_eal_state {
    WSGW_EAL_NEVER = 0,     /* rte_eal_init not called in this process */
    WSGW_EAL_READY = 1,     /* initialised */
    WSGW_EAL_FAILED = 2,    /* an init failed in a way DPDK does not allow to retry */
    WSGW_EAL_CLEANED = 3,   /* rte_eal_cleanup done; DPDK cannot be initialised again */
};
WSGW_API int wsgw_eal_init(int argc, char **argv);
WSGW_API int wsgw_eal_state(void);
WSGW_API int wsgw_eal_cleanup(void);
/* Give the calling (non-EAL) thread an lcore id, so mempool caches serve it. */
WSGW_API int wsgw_thread_register(void);
WSGW_API void wsgw_thread_unregister(void);

/* ---- ports ------------------------------------------------------------------------------ */
struct wsgw_port_conf {
    uint32_t n_mbufs;       /* mempool size */
    uint32_t mbuf_cache;    /* per-lcore mempool cache */
    uint16_t rx_desc;       /* RX ring descriptors */
    uint16_t tx_desc;       /* TX ring descriptors */
    uint16_t mtu;           /* 0: leave the device's MTU */
    uint16_t promiscuous;   /* 1: enable */
};

struct wsgw_port_stats {
    uint64_t rx_packets, rx_bytes, tx_packets, tx_bytes;
    uint64_t rx_missed;       /* dropped by the device: RX ring full (imissed) */
    uint64_t rx_errors, tx_errors;
    uint64_t rx_nombuf;       /* RX mbuf allocation failures reported by the PMD */
    uint64_t tx_dropped;      /* frames the PMD did not take; freed by the shim */
    uint64_t tx_nombuf;       /* TX frames not sent because the mempool was empty */
    uint64_t tx_oversize;     /* TX frames larger than an mbuf's data room */
    uint64_t rx_truncated;    /* RX frames that did not fit the caller's arena */
};

struct wsgw_link_info {
    uint32_t speed_mbps;
    uint16_t up;
    uint16_t full_duplex;
};

typedef struct wsgw_port wsgw_port;

WSGW_API int wsgw_port_open(const char *devargs, const struct wsgw_port_conf *conf,
                            wsgw_port **out);
WSGW_API int wsgw_port_start(wsgw_port *p);
WSGW_API int wsgw_port_stop(wsgw_port *p);
WSGW_API void wsgw_port_close(wsgw_port *p);
WSGW_API int wsgw_port_id(const wsgw_port *p);
WSGW_API int wsgw_port_mac(const wsgw_port *p, uint8_t mac[6]);
WSGW_API int wsgw_port_mtu(const wsgw_port *p);
WSGW_API int wsgw_port_link(const wsgw_port *p, struct wsgw_link_info *out);
WSGW_API int wsgw_port_stats(const wsgw_port *p, struct wsgw_port_stats *out);
/* Receive up to max frames, copying each into arena; offsets/lengths describe them.
 * Returns the number of frames copied (>= 0) or -errno. The mbufs are always freed. */
WSGW_API int wsgw_port_rx_burst(wsgw_port *p, uint8_t *arena, uint32_t arena_len,
                                uint32_t *offsets, uint16_t *lengths, uint16_t max);
/* Send n frames found at buf+offsets[i] of lengths[i]. Returns how many the PMD took;
 * the rest are freed and counted in tx_dropped / tx_nombuf / tx_oversize. */
WSGW_API int wsgw_port_tx_burst(wsgw_port *p, const uint8_t *buf, const uint32_t *offsets,
                                const uint16_t *lengths, uint16_t n);

#endif
