/* Message identity in C (issue #19): the exchange's own id of a data frame, for A/B
 * arbitration on the engine's path, without a parse. The rules are
 * gateway/dialects/identity.py's (the reference; tests/unit/dialects/test_identity_c.py
 * holds the two equal on the dialect fixtures and on generated frames), for the kinds that
 * are a scan of a few JSON fields:
 *
 *   binance   `{"stream":..,"data":{..}}` trade `t` (prev t-1), aggTrade integer `a`
 *             (prev a-1), depthUpdate `u` (prev U-1)
 *   bybit     orderbook `data.u` (prev u-1; none after a snapshot or at u=1)
 *   okx       books `data[0].seqId` after `prevSeqId` (none when negative or absent)
 *   coinbase  `sequence` per channel:product_id (linked, prev seq-1, on the full channel)
 *
 * Everything else (bookTicker, partial depth, trade ids, tickers, the raw Binance
 * endpoint, Kraken, Bitstamp, the generic dialect's hash, a string with an escape, a number
 * that is not a plain int64) gives 0: C does not tell, and the caller hands the frame to
 * Python, whose identity decides. So a 1 from C is always Python's answer; a 0 never is a
 * different one. Known divergences, on frames no exchange sends: an OKX frame with both an
 * `event` and a data array (C does not look for `event`); a frame that is broken or
 * mistyped after the fields C reads (the scan stops once it has them, as the feed's topic
 * scan does; Python's decoder reads, and refuses, the whole frame). */
#ifndef WSGW_IDENTITY_H
#define WSGW_IDENTITY_H

#include <stdint.h>

#include "wsgw_shim.h"

#define WSGW_ID_TOPIC_MAX 128u
#define WSGW_ID_NO_PREV INT64_MIN /* the exchange does not link this one (wsgw_arbiter.h) */

enum wsgw_id_dialect {
    WSGW_ID_NONE = 0, /* no C identity: every frame is Python's */
    WSGW_ID_BINANCE = 1,
    WSGW_ID_BYBIT = 2,
    WSGW_ID_OKX = 3,
    WSGW_ID_COINBASE = 4,
};

enum wsgw_id_kind { WSGW_ID_SEQUENCE = 1, WSGW_ID_ID = 2 }; /* identity.py SEQUENCE, ID */

struct wsgw_identity {
    int64_t this_id;
    int64_t prev; /* WSGW_ID_NO_PREV: none */
    uint32_t kind; /* enum wsgw_id_kind */
    uint32_t topic_len;
    char topic[WSGW_ID_TOPIC_MAX]; /* the identity's topic (not NUL-terminated) */
};

/* 1 and *out: the frame's identity; 0: C does not tell (Python's identity decides). */
WSGW_API int wsgw_identity_scan(uint32_t dialect, const uint8_t *msg, uint32_t len,
                                struct wsgw_identity *out);

#endif
