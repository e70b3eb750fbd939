/* wsgw UDP flood (benchmarks only): see udpgen.c. Python mirrors struct
 * wsgw_udp_flood_result in dataplane/shim/_bind_udpgen.py (tests/unit/test_shim_layout.py
 * checks the layout against this header). */
#ifndef WSGW_UDPGEN_H
#define WSGW_UDPGEN_H

#include <stdint.h>

#include "wsgw_shim.h"

struct wsgw_udp_flood_result {
    uint64_t sent;    /* frames the PMD took */
    uint64_t refused; /* frames handed back by the PMD (offered again; may count twice) */
    uint64_t nombuf;  /* bulk allocations that failed (mempool empty; retried) */
    uint64_t bursts;  /* rte_eth_tx_burst calls */
    uint64_t ns;      /* elapsed, CLOCK_MONOTONIC */
};

/* Exported only when built for benchmarks (WSGW_BENCH: setup.py's in-place build, `make
 * shim`), so the production library carries no benchmark code. */
#ifdef WSGW_BENCH
WSGW_API int wsgw_udp_frame(const uint8_t *tmpl, uint16_t len, uint64_t seq, int csum,
                            uint8_t *out);
WSGW_API int wsgw_udp_flood(wsgw_port *p, const uint8_t *tmpl, uint16_t len, uint64_t count,
                            uint16_t burst, uint64_t first_seq, int csum, uint64_t timeout_ns,
                            struct wsgw_udp_flood_result *out);

#endif /* WSGW_BENCH */
#endif
