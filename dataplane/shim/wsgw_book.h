/* Local order books in C: a venue's depth message (JSON text as received) parsed, its
 * sequence rule checked, its levels applied to a per-symbol book of scaled integers, and the
 * normalized delta written into the caller's buffer (gateway/normalize/schema.py's JSON and
 * MessagePack encodings, byte for byte).
 *
 * The Python side (gateway/books) keeps everything that is not per message: snapshots,
 * buffering while a REST snapshot is fetched, resync decisions, reset events. A message the
 * C path does not take (another event type, an escape in a string, a number that is not a
 * plain decimal, a sequence break, a book that is not joined yet) is applied to nothing and
 * reported by its status; the caller then runs the Python path on it, over the same book.
 *
 * Prices and sizes are exact: a level is an int64 at the side's scale (10^scale units) plus
 * the shape of its text (fraction digits, a dot), so the venue's text is rebuilt byte for
 * byte. The scale is learned from the levels loaded and widened, before anything is applied,
 * when a message carries more fraction digits; a text that does not fit in 18 digits is
 * refused (WSGW_BOOK_UNSUPPORTED) and never rounded.
 */
#ifndef WSGW_BOOK_H
#define WSGW_BOOK_H

#include <stdint.h>

#include "wsgw_shim.h"

/* Venues whose depth messages book.c parses. */
enum wsgw_book_venue {
    WSGW_BOOK_BINANCE = 1, /* diff depth `<sym>@depth[@100ms]`, combined-stream envelope */
    WSGW_BOOK_OKX = 2,     /* `books` (and the other seqId channels) updates, CRC32 top 25 */
    WSGW_BOOK_BYBIT = 3,   /* `orderbook.N.SYM` deltas */
    WSGW_BOOK_KRAKEN = 4,  /* WebSocket v2 `book` updates, CRC32 of the top 10 */
    WSGW_BOOK_COINBASE = 5,/* Exchange `level2` l2update messages */
    WSGW_BOOK_BITSTAMP = 6,/* `diff_order_book_*` data, stamped by microtimestamp */
};

enum wsgw_book_side { WSGW_BOOK_BIDS = 0, WSGW_BOOK_ASKS = 1 };

/* Status of wsgw_book_on_message and wsgw_book_update. */
enum wsgw_book_status {
    WSGW_BOOK_APPLIED = 0,     /* applied; the delta is in out */
    WSGW_BOOK_IGNORED = 1,     /* older than the book (u <= the book's u): nothing to do */
    WSGW_BOOK_GAP = 2,         /* a sequence break: nothing applied, the Python rules decide */
    WSGW_BOOK_NOT_JOINED = 3,  /* the book is not in the fast state: nothing applied */
    WSGW_BOOK_UNSUPPORTED = 4, /* well-formed but not taken here (see above): Python path */
    WSGW_BOOK_OTHER_SYMBOL = 5,/* a depth message for another symbol */
    WSGW_BOOK_NO_SPACE = 6,    /* out is too small: info JSON_LEN says how much is needed */
    WSGW_BOOK_CHECKSUM = 7,    /* applied, but the book's checksum is not the message's
                                  (info CRC_*): the Python rules resync */
    WSGW_BOOK_MALFORMED = -1,  /* not JSON (truncated, a bad token): nothing applied */
    WSGW_BOOK_TOO_DEEP = -2,   /* nesting past WSGW_BOOK_MAX_NESTING in a skipped value */
};

/* Flags of wsgw_book_on_message: which encodings of the delta to write. */
#define WSGW_BOOK_OUT_JSON 0x1
#define WSGW_BOOK_OUT_BINARY 0x2

#define WSGW_BOOK_MAX_NESTING 64
#define WSGW_BOOK_SYMBOL_MAX 64

/* What wsgw_book_on_message tells besides its status (an int64 array, WSGW_BOOK_INFO_N). */
enum wsgw_book_info {
    WSGW_BOOK_INFO_FIRST_SEQ = 0, /* Binance U */
    WSGW_BOOK_INFO_SEQ = 1,       /* Binance u */
    WSGW_BOOK_INFO_PREV_SEQ = 2,  /* Binance USD-M pu (0: none) */
    WSGW_BOOK_INFO_JSON_LEN = 3,  /* bytes of JSON at out[0] */
    WSGW_BOOK_INFO_BINARY_LEN = 4,/* bytes of MessagePack right after the JSON */
    WSGW_BOOK_INFO_CRC_EXPECTED = 5, /* on CHECKSUM: the message's */
    WSGW_BOOK_INFO_CRC_GOT = 6,      /* on CHECKSUM: the book's */
    WSGW_BOOK_INFO_N = 7,
};

struct wsgw_book;

/* A book for one symbol of a venue; NULL (wsgw_last_error) on a bad argument or no memory. */
WSGW_API struct wsgw_book *wsgw_book_new(uint32_t venue, const char *symbol, uint32_t symbol_len);
WSGW_API void wsgw_book_free(struct wsgw_book *book);
/* Empty both sides; the sequence goes to 0 and the fast state off. */
WSGW_API void wsgw_book_clear(struct wsgw_book *book);
WSGW_API int64_t wsgw_book_seq(const struct wsgw_book *book);
WSGW_API void wsgw_book_set_seq(struct wsgw_book *book, int64_t seq);
/* Fast state: the book is synced and joined, so the per-message rule alone decides. */
WSGW_API void wsgw_book_set_joined(struct wsgw_book *book, int joined);
/* Keep the best depth levels a side after each message (Bybit `orderbook.N`, Kraken's
 * subscribed depth); 0: all. */
WSGW_API void wsgw_book_set_depth(struct wsgw_book *book, uint32_t depth);
WSGW_API uint32_t wsgw_book_count(const struct wsgw_book *book, uint32_t side);
WSGW_API uint32_t wsgw_book_scale(const struct wsgw_book *book, uint32_t which);

/* Apply `[["price","size"],...]` (JSON text) to one side, in order, as the venue's
 * absolute sizes (a zero size removes the level). All or nothing: a status < 0 or
 * WSGW_BOOK_UNSUPPORTED applies nothing. */
WSGW_API int wsgw_book_update(struct wsgw_book *book, uint32_t side, const char *json,
                              uint32_t len);
/* Keep the best depth levels of each side. */
WSGW_API void wsgw_book_truncate(struct wsgw_book *book, uint32_t depth);
/* The best n levels of a side as `[["price","size"],...]` into out; returns the length, or
 * -(the length needed) when cap is too small. */
WSGW_API int64_t wsgw_book_top_json(const struct wsgw_book *book, uint32_t side, uint32_t n,
                                    char *out, uint32_t cap);

/* One message as received: parse, check the venue's sequence rule, apply, write the
 * normalized delta (flags: WSGW_BOOK_OUT_*) stamped recv_ns into out. info: WSGW_BOOK_INFO_N
 * int64s. */
WSGW_API int wsgw_book_on_message(struct wsgw_book *book, const char *msg, uint32_t len,
                                  int64_t recv_ns, uint32_t flags, char *out, uint32_t cap,
                                  int64_t *info);

/* A burst: message i is blob[offsets[i]..offsets[i+1]) stamped recv_ns[i]. Each goes through
 * wsgw_book_on_message until one is neither APPLIED nor IGNORED; returns how many went
 * (statuses[i] each, and the stopping one's at statuses[returned] when returned < n: the
 * caller takes that one by the Python path, or grows out on NO_SPACE, and goes on after it).
 * The deltas are back to back in out; lens[2i], lens[2i+1]: message i's JSON and
 * MessagePack bytes (0 when IGNORED); on NO_SPACE, lens[2i] is the room message i needs, on
 * CHECKSUM lens[2i], lens[2i+1] are the expected and the book's checksums. */
WSGW_API uint32_t wsgw_book_on_batch(struct wsgw_book *book, const char *blob,
                                     const uint32_t *offsets, uint32_t n, const int64_t *recv_ns,
                                     uint32_t flags, char *out, uint32_t cap, int64_t *lens,
                                     int8_t *statuses);

#endif
