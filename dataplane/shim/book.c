/* Local order books in C (see wsgw_book.h for the contract).
 *
 * A side is one array of levels sorted worst first, so the best level is the last one and
 * the updates near the touch, which are most of them, move only the few levels behind
 * them. A message is read by a small recursive-descent scanner that knows only the shape
 * it needs (like topic.c's, nothing allocated per message: the level spans go into arrays
 * owned by the book, grown when a message holds more levels than any before); it is
 * applied only once all of it has been read and checked, so a truncated or malformed
 * message changes nothing.
 *
 * Binance diff depth (https://developers.binance.com/docs/binance-spot-api-docs/
 * web-socket-streams#diff-depth-stream and "How to manage a local order book correctly"):
 * an event with `u` <= the book's is dropped; once joined, each `U` is the previous `u` + 1
 * (USD-M futures: `pu` is the previous `u`).
 *
 * Kraken v2 `book` (https://docs.kraken.com/api/docs/websocket-v2/book and its "Checksum"
 * guide): no sequence; after each update the book is cut to the subscribed depth and the
 * CRC32 of its top 10 (asks best first, then bids best first, each price and quantity with
 * the dot and leading zeros removed) must be the message's `checksum`. Prices and
 * quantities are JSON numbers, their text kept as sent (as gateway.normalize does).
 *
 * Coinbase Exchange `level2` (https://docs.cdp.coinbase.com/exchange/websocket-feed/channels,
 * "Level2 Channel"): `l2update` messages, `changes` of [side, price, size] in order, no
 * sequence and no checksum; "buy" is a bid, any other side an ask (as the normalizer).
 *
 * Bitstamp `diff_order_book_{pair}` (https://www.bitstamp.net/websocket/v2/, "Live full
 * order book"): no sequence; its microtimestamp orders the diffs, one older than the book's
 * is out of order (the Python rules resync), the same or newer applies. The book joins the
 * REST snapshot in Python.
 */
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "shim_internal.h"
#include "wsgw_book.h"

#define MAX_DIGITS 18 /* a scaled value stays below 10^18, well inside int64 */

static const int64_t POW10[MAX_DIGITS + 1] = {
    1LL,
    10LL,
    100LL,
    1000LL,
    10000LL,
    100000LL,
    1000000LL,
    10000000LL,
    100000000LL,
    1000000000LL,
    10000000000LL,
    100000000000LL,
    1000000000000LL,
    10000000000000LL,
    100000000000000LL,
    1000000000000000LL,
    10000000000000000LL,
    100000000000000000LL,
    1000000000000000000LL,
};

/* "price:size" as the venue sent them: at most 19 + 1 + 19 bytes (18 digits and a dot each,
 * which prepare() ensures). Kept so that reads and checksums copy, never format. */
#define TEXT_MAX 46

struct level {
    int64_t px, sz; /* at the book's price and size scales: order and identity */
    uint8_t plen, tlen;
    char text[TEXT_MAX];
};

struct side {
    struct level *v; /* worst first: bids ascending, asks descending */
    uint32_t n, cap;
    int sign; /* +1 bids, -1 asks: v is ascending by sign * px */
};

/* A level as read from a message, before it is applied. */
struct parsed {
    const uint8_t *p, *q;
    uint32_t plen, qlen;
    uint8_t pw, pf, pdot, sw, sf, sdot; /* whole digits, fraction digits, a dot */
};

struct pending {
    struct parsed *v;
    uint32_t n, cap;
};

struct wsgw_book {
    uint32_t venue;
    uint32_t symbol_len;
    char symbol[WSGW_BOOK_SYMBOL_MAX];
    int64_t seq;
    int joined;
    uint32_t depth; /* keep this many levels a side after each message (0: all) */
    uint32_t pscale, sscale;
    struct side sides[2];
    struct pending pending[2];
};

/* ---- the scanner ------------------------------------------------------------------------ */
enum { OK = 0, E_MALFORMED = 1, E_DEEP = 2 };

struct scan {
    const uint8_t *p, *end;
    int err;
    int unsupported; /* well-formed so far, but not a message the C path takes */
};

/* Bytes that may follow a number or a literal. */
static const uint8_t ENDS_TOKEN[256] = {
    [' '] = 1, ['\t'] = 1, ['\r'] = 1, ['\n'] = 1, [','] = 1, [']'] = 1, ['}'] = 1,
};

static inline void skip_ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static inline int bad(struct scan *s)
{
    if (!s->err)
        s->err = E_MALFORMED;
    return -1;
}

/* After an item of a JSON array or object: 1 when a ',' follows (read), 0 when `close`
 * does (read), -1 when anything else does (malformed). */
static inline int next_item(struct scan *s, uint8_t close)
{
    skip_ws(s);
    if (s->p >= s->end)
        return bad(s);
    if (*s->p == ',') {
        s->p++;
        return 1;
    }
    if (*s->p != close)
        return bad(s);
    s->p++;
    return 0;
}

/* At an opening bracket: steps past it; 1 when `close` follows at once (the container is
 * empty, its close read), else 0 (s->p at the first item). */
static inline int open_container(struct scan *s, uint8_t close)
{
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 1;
    }
    return 0;
}

/* At an opening quote: the string's bytes between the quotes; *plain is 0 when it holds an
 * escape or a non-ASCII byte (which only the Python path decodes). */
static int read_string(struct scan *s, const uint8_t **out, uint32_t *len, int *plain)
{
    const uint8_t *p = s->p + 1, *start = p;
    *plain = 1;
    for (;;) {
#if defined(__SSE2__)
        /* 16 plain bytes at a time: no quote, backslash, control or non-ASCII byte (the
         * signed compare below 0x20 catches both of the last two) */
        const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
        const __m128i space = _mm_set1_epi8(0x20);
        while (s->end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                       _mm_cmplt_epi8(v, space));
            int m = _mm_movemask_epi8(hit);
            if (m) {
                p += __builtin_ctz((unsigned)m);
                break;
            }
            p += 16;
        }
#endif
        if (p >= s->end)
            return bad(s);
        uint8_t c = *p;
        if (c == '"')
            break;
        if (c < 0x20)
            return bad(s);
        if (c >= 0x80)
            *plain = 0;
        if (c == '\\') {
            *plain = 0;
            if (p + 1 >= s->end)
                return bad(s);
            c = p[1];
            if (c == 'u') {
                if (s->end - p < 6)
                    return bad(s);
                for (int i = 2; i < 6; i++) {
                    uint8_t h = p[i];
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F')))
                        return bad(s);
                }
                p += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", c) || c == 0)
                return bad(s);
            p += 2;
            continue;
        }
        p++;
    }
    *out = start;
    *len = (uint32_t)(p - start);
    s->p = p + 1;
    return 0;
}

/* A JSON number token; *is_int and *value when it is an integer of at most 18 digits. */
static int read_number(struct scan *s, int64_t *value, int *is_int)
{
    const uint8_t *p = s->p, *end = s->end;
    int neg = 0, digits = 0;
    int64_t v = 0;
    *is_int = 1;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9')
        return bad(s);
    if (*p == '0') {
        p++;
        digits = 1;
    } else {
        while (p < end && *p >= '0' && *p <= '9') {
            if (digits < MAX_DIGITS)
                v = v * 10 + (*p - '0');
            digits++;
            p++;
        }
    }
    if (digits > MAX_DIGITS)
        *is_int = 0;
    if (p < end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return bad(s);
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return bad(s);
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    /* A number must end the token: "12x" is not JSON. */
    if (p < end && !ENDS_TOKEN[*p])
        return bad(s);
    *value = neg ? -v : v;
    s->p = p;
    return 0;
}

static int skip_value(struct scan *s, int depth);

static int skip_literal(struct scan *s, const char *word, size_t n)
{
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return bad(s);
    s->p += n;
    if (s->p < s->end && !ENDS_TOKEN[*s->p])
        return bad(s);
    return 0;
}

/* After an opening bracket: the members up to the closing one. */
static int skip_container(struct scan *s, int depth, uint8_t close)
{
    if (open_container(s, close))
        return 0;
    for (;;) {
        skip_ws(s);
        if (close == '}') {
            const uint8_t *k;
            uint32_t klen;
            int plain;
            if (s->p >= s->end || *s->p != '"' || read_string(s, &k, &klen, &plain))
                return bad(s);
            skip_ws(s);
            if (s->p >= s->end || *s->p != ':')
                return bad(s);
            s->p++;
            skip_ws(s);
        }
        if (skip_value(s, depth + 1))
            return -1;
        int sep = next_item(s, close);
        if (sep <= 0)
            return sep;
    }
}

static int skip_value(struct scan *s, int depth)
{
    if (depth > WSGW_BOOK_MAX_NESTING) {
        s->err = E_DEEP;
        return -1;
    }
    if (s->p >= s->end)
        return bad(s);
    switch (*s->p) {
    case '"': {
        const uint8_t *v;
        uint32_t n;
        int plain;
        if (read_string(s, &v, &n, &plain))
            return -1;
        if (!plain)
            s->unsupported = 1; /* the Python decoder may refuse it (bad UTF-8) */
        return 0;
    }
    case '{':
        return skip_container(s, depth, '}');
    case '[':
        return skip_container(s, depth, ']');
    case 't':
        return skip_literal(s, "true", 4);
    case 'f':
        return skip_literal(s, "false", 5);
    case 'n':
        return skip_literal(s, "null", 4);
    default: {
        int64_t v;
        int is_int;
        return read_number(s, &v, &is_int);
    }
    }
}

/* A plain decimal: digits (no leading zero but "0"), then optionally a dot and digits. */
static int decimal_shape(const uint8_t *t, uint32_t n, uint8_t *whole, uint8_t *frac, uint8_t *dot)
{
    uint32_t i = 0;
    while (i < n && t[i] >= '0' && t[i] <= '9')
        i++;
    if (i == 0 || i > MAX_DIGITS || (i > 1 && t[0] == '0'))
        return -1;
    *whole = (uint8_t)i;
    *dot = 0;
    *frac = 0;
    if (i == n)
        return 0;
    if (t[i] != '.')
        return -1;
    *dot = 1;
    uint32_t f = n - i - 1;
    if (f > MAX_DIGITS)
        return -1;
    for (uint32_t j = i + 1; j < n; j++)
        if (t[j] < '0' || t[j] > '9')
            return -1;
    *frac = (uint8_t)f;
    return 0;
}

static int64_t scaled(const uint8_t *t, uint8_t whole, uint8_t frac, uint8_t dot, uint32_t scale)
{
    int64_t v = 0;
    for (uint32_t i = 0; i < whole; i++)
        v = v * 10 + (t[i] - '0');
    for (uint32_t i = 0; i < frac; i++)
        v = v * 10 + (t[whole + dot + i] - '0');
    return v * POW10[scale - frac];
}

static int pending_push(struct pending *pd, const struct parsed *lv)
{
    if (pd->n == pd->cap) {
        uint32_t cap = pd->cap ? pd->cap * 2 : 64;
        struct parsed *v = realloc(pd->v, (size_t)cap * sizeof(*v));
        if (!v)
            return -1;
        pd->v = v;
        pd->cap = cap;
    }
    pd->v[pd->n++] = *lv;
    return 0;
}

/* A level read: onto pd when `plain` and both its numbers are plain decimals, else it marks
 * the message unsupported (the Python path reads it). -1 when pd cannot grow: out of memory
 * refuses the message whole. */
static int take_level(struct scan *s, struct pending *pd, struct parsed *lv, int plain)
{
    if (!plain || decimal_shape(lv->p, lv->plen, &lv->pw, &lv->pf, &lv->pdot) ||
        decimal_shape(lv->q, lv->qlen, &lv->sw, &lv->sf, &lv->sdot)) {
        s->unsupported = 1;
        return 0;
    }
    if (pending_push(pd, lv) == 0)
        return 0;
    s->err = E_MALFORMED;
    wsgw_set_error("book: out of memory for %u levels", pd->n);
    return -1;
}

/* At '[': `[["p","q"],...]` into pd. A value of another shape is skipped and marks the
 * message unsupported. */
static int read_levels(struct scan *s, struct pending *pd, int depth)
{
    const uint8_t *start = s->p;
    pd->n = 0;
    if (s->p >= s->end || *s->p != '[')
        goto other;
    if (open_container(s, ']'))
        return 0;
    for (;;) {
        struct parsed lv;
        int plain_p, plain_q;
        skip_ws(s);
        if (s->p >= s->end || *s->p != '[')
            goto other;
        s->p++;
        skip_ws(s);
        if (s->p >= s->end || *s->p != '"')
            goto other;
        if (read_string(s, &lv.p, &lv.plen, &plain_p))
            return -1;
        skip_ws(s);
        if (s->p >= s->end || *s->p != ',')
            goto other;
        s->p++;
        skip_ws(s);
        if (s->p >= s->end || *s->p != '"')
            goto other;
        if (read_string(s, &lv.q, &lv.qlen, &plain_q))
            return -1;
        skip_ws(s);
        while (s->p < s->end && *s->p == ',') { /* OKX's extra fields: ignored, as by Level */
            s->p++;
            skip_ws(s);
            if (skip_value(s, depth + 2))
                return -1;
            skip_ws(s);
        }
        if (s->p >= s->end || *s->p != ']')
            goto other;
        s->p++;
        if (take_level(s, pd, &lv, plain_p && plain_q))
            return -1;
        int sep = next_item(s, ']');
        if (sep <= 0)
            return sep;
    }
other:
    /* Not the shape of levels: read it again as any value (it may still be malformed). */
    s->p = start;
    s->unsupported = 1;
    pd->n = 0;
    return skip_value(s, depth);
}

static inline int key_is(const uint8_t *k, uint32_t n, const char *word)
{
    return strlen(word) == n && memcmp(k, word, n) == 0;
}

static inline int starts_with(const uint8_t *k, uint32_t n, const char *word)
{
    return strlen(word) <= n && memcmp(k, word, strlen(word)) == 0;
}

/* What a depth message says besides its levels (those go to the book's pending arrays). */
struct msg {
    const uint8_t *sym, *kind, *action; /* kind: Binance stream, OKX channel, Bybit topic */
    uint32_t sym_len, kind_len, action_len;
    int64_t first, seq, prev, ts_ms, crc;
    int64_t ts_ns; /* Kraken, Coinbase: the timestamp (RFC 3339) in ns */
    unsigned seen; /* Coinbase, Bitstamp: members read (a repeated one is Python's) */
    unsigned have;
    int items; /* OKX: elements of data */
};

enum {
    HAVE_TS = 1,
    HAVE_FIRST = 2,
    HAVE_SEQ = 4,
    HAVE_SYM = 8,
    HAVE_BIDS = 16,
    HAVE_ASKS = 32,
    HAVE_CRC = 64,
    HAVE_DATA = 128,
    HAVE_KIND = 256,
    HAVE_ARG = 512,
    HAVE_PRICE = 1024, /* Kraken level members */
    HAVE_QTY = 2048,
};

/* An object member's key into (k, klen), s->p then at its value; an escaped key marks the
 * message unsupported (C matches keys as sent). -1 when the text is not JSON. */
static int member_key(struct scan *s, const uint8_t **k, uint32_t *klen)
{
    int plain;
    skip_ws(s);
    if (s->p >= s->end || *s->p != '"' || read_string(s, k, klen, &plain))
        return bad(s);
    if (!plain)
        s->unsupported = 1;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':')
        return bad(s);
    s->p++;
    skip_ws(s);
    if (s->p >= s->end)
        return bad(s);
    return 0;
}

/* A member reader: reads the value at s->p for key k and returns 0, or -1 on an error, or 1
 * when the key is not one it reads (the value is then skipped). */
typedef int (*member_fn)(struct scan *s, struct wsgw_book *b, struct msg *m, const uint8_t *k,
                         uint32_t klen);

/* How a venue's member is read: an integer or a string into struct msg, levels into a side's
 * pending array, or a nested object ('{') or array of objects ('[') by another reader. */
enum { F_INT, F_STR, F_BIDS, F_ASKS, F_NESTED };

/* A member a venue sends as it stands: its key, how it is read and where it goes (the offset
 * of a struct msg field, and of a string's length), the bit it sets in m->have. */
struct field {
    const char *key;
    uint32_t klen;
    uint8_t kind;
    char open; /* F_NESTED: '{' or '[' */
    uint16_t at, len_at;
    unsigned bit;
    const struct reader *nested;
};

#define INT_FIELD(key, member, bit)                                                              \
    {key, sizeof(key) - 1, F_INT, 0, offsetof(struct msg, member), 0, bit, NULL}
#define STR_FIELD(key, member, bit)                                                              \
    {key, sizeof(key) - 1, F_STR, 0, offsetof(struct msg, member),                              \
     offsetof(struct msg, member##_len), bit, NULL}
#define LEVELS_FIELD(key, kind) {key, sizeof(key) - 1, kind, 0, 0, 0, 0, NULL}
#define NESTED_FIELD(key, open, bit, reader) {key, sizeof(key) - 1, F_NESTED, open, 0, 0, bit, reader}
#define END_FIELDS {NULL, 0, 0, 0, 0, 0, 0, NULL}

/* A venue's object: the members in its table of fields (NULL-keyed at the end), then those fn
 * reads (checks and shapes of the venue's own; fn may be NULL). */
struct reader {
    const struct field *fields;
    member_fn fn;
};

static int read_member(struct scan *s, struct wsgw_book *b, struct msg *m, const struct reader *r,
                       const uint8_t *k, uint32_t klen);

/* The next member of the object whose '{' s->p was at when *started was 0: 1 with its key in
 * (k, klen) and s->p at its value, 0 once the closing '}' is read, -1 when it is not JSON. */
static inline int next_member(struct scan *s, int *started, const uint8_t **k, uint32_t *klen)
{
    if (!*started) {
        *started = 1;
        if (open_container(s, '}'))
            return 0;
    } else {
        int sep = next_item(s, '}');
        if (sep <= 0)
            return sep;
    }
    return member_key(s, k, klen) ? -1 : 1;
}

static int read_object(struct scan *s, struct wsgw_book *b, struct msg *m, const struct reader *r)
{
    const uint8_t *k;
    uint32_t klen;
    int started = 0, rc;
    while ((rc = next_member(s, &started, &k, &klen)) > 0) {
        rc = read_member(s, b, m, r, k, klen);
        if (rc > 0)
            rc = skip_value(s, 2);
        if (rc)
            return -1;
    }
    return rc;
}

/* An array of objects (s->p at its '['), each read by fn and counted in m->items; any other
 * value in it is skipped and marks the message unsupported. */
static int read_objects(struct scan *s, struct wsgw_book *b, struct msg *m, const struct reader *r)
{
    if (open_container(s, ']'))
        return 0;
    for (;;) {
        skip_ws(s);
        if (s->p >= s->end)
            return bad(s);
        m->items++;
        if (*s->p == '{') {
            if (read_object(s, b, m, r))
                return -1;
        } else {
            s->unsupported = 1;
            if (skip_value(s, 2))
                return -1;
        }
        int sep = next_item(s, ']');
        if (sep <= 0)
            return sep;
    }
}

/* An integer member; another kind of value is read but marks the message unsupported. */
static int int_member(struct scan *s, struct msg *m, int64_t *out, unsigned bit)
{
    if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9')) {
        int is_int;
        if (read_number(s, out, &is_int))
            return -1;
        if (!is_int)
            s->unsupported = 1;
        m->have |= bit;
        return 0;
    }
    s->unsupported = 1;
    return skip_value(s, 2);
}

static int str_member(struct scan *s, struct msg *m, const uint8_t **out, uint32_t *len, unsigned bit)
{
    if (*s->p == '"') {
        int plain;
        if (read_string(s, out, len, &plain))
            return -1;
        if (!plain)
            s->unsupported = 1;
        m->have |= bit;
        return 0;
    }
    s->unsupported = 1;
    return skip_value(s, 2);
}

/* A nested member: an object or an array of objects, as f says, read by its reader; another
 * value marks the message unsupported and gives 1 (the caller skips it). */
static int nested_member(struct scan *s, struct wsgw_book *b, struct msg *m, const struct field *f)
{
    if (*s->p != f->open) {
        s->unsupported = 1;
        return 1;
    }
    m->have |= f->bit;
    return f->open == '{' ? read_object(s, b, m, f->nested) : read_objects(s, b, m, f->nested);
}

/* A top-level member's key and the bit that marks it seen (a table ends with a NULL key). */
struct member_key {
    const char *key;
    unsigned bit;
};

/* The bit of key k in keys, 0 when it is none of them; a member seen twice marks the message
 * unsupported (C reads each once, the Python decoder keeps the last). */
static unsigned seen_once(struct scan *s, struct msg *m, const struct member_key *keys,
                          const uint8_t *k, uint32_t klen)
{
    for (; keys->key; keys++) {
        if (key_is(k, klen, keys->key)) {
            if (m->seen & keys->bit)
                s->unsupported = 1;
            m->seen |= keys->bit;
            return keys->bit;
        }
    }
    return 0;
}

static int levels_member(struct scan *s, struct wsgw_book *b, struct msg *m, int side)
{
    m->have |= side == WSGW_BOOK_BIDS ? HAVE_BIDS : HAVE_ASKS;
    return read_levels(s, &b->pending[side], 2);
}

/* Member k by r's table of fields, else by r->fn; 1 when neither reads it. */
static int read_member(struct scan *s, struct wsgw_book *b, struct msg *m, const struct reader *r,
                       const uint8_t *k, uint32_t klen)
{
    for (const struct field *f = r->fields; f && f->key; f++) {
        /* the first byte before memcmp: most keys are a letter or two (Binance, Bybit) */
        if (f->klen != klen || f->key[0] != k[0] || memcmp(f->key + 1, k + 1, klen - 1) != 0)
            continue;
        uint8_t *at = (uint8_t *)m + f->at;
        switch (f->kind) {
        case F_INT:
            return int_member(s, m, (int64_t *)(void *)at, f->bit);
        case F_STR:
            return str_member(s, m, (const uint8_t **)(void *)at,
                              (uint32_t *)(void *)((uint8_t *)m + f->len_at), f->bit);
        case F_BIDS:
            return levels_member(s, b, m, WSGW_BOOK_BIDS);
        case F_ASKS:
            return levels_member(s, b, m, WSGW_BOOK_ASKS);
        default:
            return nested_member(s, b, m, f);
        }
    }
    return r->fn ? r->fn(s, b, m, k, klen) : 1;
}

/* Binance `data`: {"e":"depthUpdate","E":ms,"s":sym,"U":first,"u":last,["pu":prev,]"b":[],"a":[]} */
static const struct field BINANCE_DATA[] = {
    INT_FIELD("E", ts_ms, HAVE_TS),
    INT_FIELD("U", first, HAVE_FIRST),
    INT_FIELD("u", seq, HAVE_SEQ),
    STR_FIELD("s", sym, HAVE_SYM),
    LEVELS_FIELD("b", F_BIDS),
    LEVELS_FIELD("a", F_ASKS),
    INT_FIELD("pu", prev, 0),
    END_FIELDS};
static const struct reader BINANCE_DATA_READER = {BINANCE_DATA, NULL};

static const struct field BINANCE_TOP[] = {
    STR_FIELD("stream", kind, HAVE_KIND),
    NESTED_FIELD("data", '{', HAVE_DATA, &BINANCE_DATA_READER),
    END_FIELDS};

/* OKX `books` data element: {"asks":[[p,q,"0",n]],"bids":[...],"ts":"ms","checksum":c,
 * "seqId":n,"prevSeqId":n} */
static const struct field OKX_BOOK[] = {
    LEVELS_FIELD("bids", F_BIDS),
    LEVELS_FIELD("asks", F_ASKS),
    INT_FIELD("seqId", seq, HAVE_SEQ),
    INT_FIELD("prevSeqId", prev, 0),
    END_FIELDS};

/* OKX's "checksum" (null is None) and "ts" (ms as a string) */
static int okx_book(struct scan *s, struct wsgw_book *b, struct msg *m, const uint8_t *k,
                    uint32_t klen)
{
    (void)b;
    if (key_is(k, klen, "checksum")) {
        if (*s->p == 'n') {
            m->have &= ~(unsigned)HAVE_CRC; /* None */
            return skip_literal(s, "null", 4);
        }
        return int_member(s, m, &m->crc, HAVE_CRC);
    }
    if (key_is(k, klen, "ts")) {
        const uint8_t *t = NULL;
        uint32_t n = 0; /* stays so when ts is not a string (then unsupported) */
        if (str_member(s, m, &t, &n, HAVE_TS))
            return -1;
        m->ts_ms = 0; /* "" is 0 (venues.py _int) */
        if (n > 13)
            s->unsupported = 1;
        for (uint32_t i = 0; i < n && i <= 13; i++) {
            if (t[i] < '0' || t[i] > '9')
                s->unsupported = 1;
            m->ts_ms = m->ts_ms * 10 + (t[i] - '0');
        }
        return 0;
    }
    return 1;
}
static const struct reader OKX_BOOK_READER = {OKX_BOOK, okx_book};

static const struct field OKX_ARG[] = {
    STR_FIELD("channel", kind, HAVE_KIND),
    STR_FIELD("instId", sym, HAVE_SYM),
    END_FIELDS};
static const struct reader OKX_ARG_READER = {OKX_ARG, NULL};

static const struct field OKX_TOP[] = {
    NESTED_FIELD("arg", '{', HAVE_ARG, &OKX_ARG_READER),
    STR_FIELD("action", action, 0),
    NESTED_FIELD("data", '[', HAVE_DATA, &OKX_BOOK_READER),
    END_FIELDS};

/* Bybit `orderbook.N.SYM`: {"topic":..,"type":"delta","ts":ms,"data":{"s":..,"b":[],"a":[],
 * "u":n,"seq":n}} */
static const struct field BYBIT_DATA[] = {
    STR_FIELD("s", sym, HAVE_SYM),
    LEVELS_FIELD("b", F_BIDS),
    LEVELS_FIELD("a", F_ASKS),
    INT_FIELD("u", seq, HAVE_SEQ),
    END_FIELDS};

/* Bybit's "seq" (the cross sequence): an integer, not kept */
static int bybit_data(struct scan *s, struct wsgw_book *b, struct msg *m, const uint8_t *k,
                      uint32_t klen)
{
    int64_t ignored;
    (void)b;
    return key_is(k, klen, "seq") ? int_member(s, m, &ignored, 0) : 1;
}
static const struct reader BYBIT_DATA_READER = {BYBIT_DATA, bybit_data};

static const struct field BYBIT_TOP[] = {
    STR_FIELD("topic", kind, HAVE_KIND),
    STR_FIELD("type", action, 0),
    INT_FIELD("ts", ts_ms, 0),
    NESTED_FIELD("data", '{', HAVE_DATA, &BYBIT_DATA_READER),
    END_FIELDS};

/* At a member's value that should be an array: 1 when its items follow (s->p past the '['),
 * else 0 when it was empty or not an array (then skipped: the message is unsupported), or -1
 * when the text is not JSON. */
static int array_items(struct scan *s)
{
    if (*s->p != '[') {
        s->unsupported = 1;
        return skip_value(s, 2) ? -1 : 0;
    }
    return !open_container(s, ']');
}

/* A plain JSON number's text, as decimal_shape takes it (else the message is unsupported). */
static int number_text(struct scan *s, const uint8_t **t, uint32_t *n)
{
    int64_t ignored;
    int is_int;
    const uint8_t *start = s->p;
    if (*s->p != '-' && (*s->p < '0' || *s->p > '9')) {
        s->unsupported = 1; /* a string, null...: the Python path's Level would differ */
        return skip_value(s, 3);
    }
    if (read_number(s, &ignored, &is_int))
        return -1;
    *t = start;
    *n = (uint32_t)(s->p - start);
    return 0;
}

/* At '[': Kraken's `[{"price":p,"qty":q},...]` into pd (other members of a level skipped, as
 * msgspec does; a missing or repeated price or qty makes the message unsupported). */
static int kraken_levels(struct scan *s, struct pending *pd)
{
    pd->n = 0;
    int rc = array_items(s);
    if (rc <= 0)
        return rc;
    for (;;) {
        struct parsed lv;
        unsigned have = 0;
        memset(&lv, 0, sizeof(lv));
        skip_ws(s);
        if (s->p >= s->end)
            return bad(s);
        if (*s->p != '{') {
            s->unsupported = 1;
            if (skip_value(s, 3))
                return -1;
        } else {
            const uint8_t *k;
            uint32_t klen;
            int started = 0;
            while ((rc = next_member(s, &started, &k, &klen)) > 0) {
                if (key_is(k, klen, "price")) {
                    s->unsupported |= (have & HAVE_PRICE) != 0;
                    have |= HAVE_PRICE;
                    rc = number_text(s, &lv.p, &lv.plen);
                } else if (key_is(k, klen, "qty")) {
                    s->unsupported |= (have & HAVE_QTY) != 0;
                    have |= HAVE_QTY;
                    rc = number_text(s, &lv.q, &lv.qlen);
                } else {
                    rc = skip_value(s, 3);
                }
                if (rc)
                    return -1;
            }
            if (rc < 0 || take_level(s, pd, &lv, have == (HAVE_PRICE | HAVE_QTY) && lv.p && lv.q))
                return -1;
        }
        int sep = next_item(s, ']');
        if (sep <= 0)
            return sep;
    }
}

static int digits_at(const uint8_t *t, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9')
            return -1;
        v = v * 10 + (t[i] - '0');
    }
    *out = v;
    return 0;
}

/* "YYYY-MM-DDTHH:MM:SS[.f{1,6}]Z" -> ns since the epoch, as venues.datetime_ns gives it
 * from msgspec's datetime (microseconds); any other form is left to the Python path. */
static int rfc3339_ns(const uint8_t *t, uint32_t n, int64_t *out)
{
    int y, mo, d, h, mi, sec, us = 0;
    static const int MDAYS[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (n < 20 || n > 27 || t[4] != '-' || t[7] != '-' || t[10] != 'T' || t[13] != ':' ||
        t[16] != ':' || t[n - 1] != 'Z' || digits_at(t, 4, &y) || digits_at(t + 5, 2, &mo) ||
        digits_at(t + 8, 2, &d) || digits_at(t + 11, 2, &h) || digits_at(t + 14, 2, &mi) ||
        digits_at(t + 17, 2, &sec))
        return -1;
    if (n > 20) {
        int f = (int)n - 21;
        if (t[19] != '.' || f < 1 || f > 6 || digits_at(t + 20, f, &us))
            return -1;
        for (int i = f; i < 6; i++)
            us *= 10;
    } else if (t[19] != 'Z') {
        return -1;
    }
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (y < 1970 || y > 2200 || mo < 1 || mo > 12 || d < 1 ||
        d > MDAYS[mo - 1] + (mo == 2 && leap) || h > 23 || mi > 59 || sec > 59)
        return -1;
    /* days from civil (H. Hinnant's algorithm), y >= 1970 so no negative eras */
    int yy = y - (mo <= 2);
    int64_t era = yy / 400, yoe = yy - era * 400;
    int64_t doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    int64_t days = era * 146097 + doe - 719468;
    *out = (((days * 24 + h) * 60 + mi) * 60 + sec) * 1000000000LL + (int64_t)us * 1000;
    return 0;
}

/* Kraken data element: {"symbol":..,"bids":[..],"asks":[..],"checksum":n,"timestamp":".."} */
static int kraken_book(struct scan *s, struct wsgw_book *b, struct msg *m, const uint8_t *k,
                       uint32_t klen)
{
    if (key_is(k, klen, "bids")) {
        m->have |= HAVE_BIDS;
        return kraken_levels(s, &b->pending[WSGW_BOOK_BIDS]);
    }
    if (key_is(k, klen, "asks")) {
        m->have |= HAVE_ASKS;
        return kraken_levels(s, &b->pending[WSGW_BOOK_ASKS]);
    }
    if (key_is(k, klen, "checksum")) {
        if (*s->p == 'n') {
            m->have &= ~(unsigned)HAVE_CRC;
            return skip_literal(s, "null", 4);
        }
        if (int_member(s, m, &m->crc, HAVE_CRC))
            return -1;
        if (m->crc < 0 || m->crc > 0xffffffffLL)
            s->unsupported = 1; /* never a CRC32: let the Python rule compare it */
        return 0;
    }
    if (key_is(k, klen, "timestamp")) {
        const uint8_t *t = NULL;
        uint32_t n = 0;
        m->ts_ns = 0;
        if (*s->p == 'n')
            return skip_literal(s, "null", 4);
        if (str_member(s, m, &t, &n, 0))
            return -1;
        if (t && rfc3339_ns(t, n, &m->ts_ns))
            s->unsupported = 1;
        return 0;
    }
    return 1;
}

static const struct field KRAKEN_BOOK[] = {STR_FIELD("symbol", sym, HAVE_SYM), END_FIELDS};
static const struct reader KRAKEN_BOOK_READER = {KRAKEN_BOOK, kraken_book};

static const struct field KRAKEN_TOP[] = {
    STR_FIELD("channel", kind, HAVE_KIND),
    STR_FIELD("type", action, 0),
    END_FIELDS};

/* Kraken's "data": a repeated one replaces the first */
static int kraken_top(struct scan *s, struct wsgw_book *b, struct msg *m, const uint8_t *k,
                      uint32_t klen)
{
    if (key_is(k, klen, "data")) {
        if (*s->p != '[') {
            s->unsupported = 1;
            return 1;
        }
        /* a repeated "data" replaces the first (the Python decoder keeps the last) */
        m->have = (m->have & ~(unsigned)(HAVE_SYM | HAVE_BIDS | HAVE_ASKS | HAVE_CRC)) | HAVE_DATA;
        m->items = 0;
        m->ts_ns = 0;
        b->pending[0].n = b->pending[1].n = 0;
        return read_objects(s, b, m, &KRAKEN_BOOK_READER);
    }
    return 1;
}

/* At '[': Coinbase's `[["buy"|"sell", "price", "size"], ...]` into the bids' and the asks'
 * pending arrays, in order. Anything but three plain strings a change is unsupported. */
static int coinbase_changes(struct scan *s, struct wsgw_book *b)
{
    struct pending *bids = &b->pending[WSGW_BOOK_BIDS], *asks = &b->pending[WSGW_BOOK_ASKS];
    bids->n = asks->n = 0;
    int rc = array_items(s);
    if (rc <= 0)
        return rc;
    for (;;) {
        const uint8_t *start;
        const uint8_t *side = NULL;
        uint32_t side_len = 0;
        struct parsed lv;
        int plain[3] = {0, 0, 0};
        skip_ws(s);
        if (s->p >= s->end)
            return bad(s);
        start = s->p;
        if (*s->p != '[')
            goto other;
        s->p++;
        for (int i = 0; i < 3; i++) {
            skip_ws(s);
            if (s->p >= s->end || *s->p != '"')
                goto other;
            if (read_string(s, i == 0 ? &side : i == 1 ? &lv.p : &lv.q,
                            i == 0 ? &side_len : i == 1 ? &lv.plen : &lv.qlen, &plain[i]))
                return -1;
            skip_ws(s);
            if (s->p >= s->end || *s->p != (i < 2 ? ',' : ']'))
                goto other;
            s->p++;
        }
        if (take_level(s, key_is(side, side_len, "buy") ? bids : asks, &lv,
                       plain[0] && plain[1] && plain[2]))
            return -1;
        goto next;
    other:
        s->p = start;
        s->unsupported = 1;
        if (skip_value(s, 3))
            return -1;
    next:
        int sep = next_item(s, ']');
        if (sep <= 0)
            return sep;
    }
}

/* Coinbase: {"type":"l2update","product_id":..,"changes":[..],"time":".."} */
static int coinbase_top(struct scan *s, struct wsgw_book *b, struct msg *m, const uint8_t *k,
                        uint32_t klen)
{
    static const struct member_key keys[] = {
        {"type", HAVE_KIND}, {"product_id", HAVE_SYM}, {"changes", HAVE_BIDS}, {"time", HAVE_TS},
        {NULL, 0}};
    switch (seen_once(s, m, keys, k, klen)) {
    case 0:
        return 1;
    case HAVE_KIND:
        return str_member(s, m, &m->action, &m->action_len, HAVE_KIND);
    case HAVE_SYM:
        return str_member(s, m, &m->sym, &m->sym_len, HAVE_SYM);
    case HAVE_BIDS:
        m->have |= HAVE_BIDS | HAVE_ASKS;
        return coinbase_changes(s, b);
    default: {
        const uint8_t *t = NULL;
        uint32_t n = 0;
        if (str_member(s, m, &t, &n, HAVE_TS))
            return -1;
        if (!t || rfc3339_ns(t, n, &m->ts_ns))
            s->unsupported = 1;
        return 0;
    }
    }
}

/* Bitstamp `data`: {"timestamp":"s","microtimestamp":"us","bids":[..],"asks":[..]} */
static const struct field BITSTAMP_DATA[] = {
    LEVELS_FIELD("bids", F_BIDS),
    LEVELS_FIELD("asks", F_ASKS),
    END_FIELDS};

static int bitstamp_data(struct scan *s, struct wsgw_book *b, struct msg *m, const uint8_t *k,
                         uint32_t klen)
{
    (void)b;
    if (key_is(k, klen, "microtimestamp")) {
        const uint8_t *t = NULL;
        uint32_t n = 0;
        if (str_member(s, m, &t, &n, HAVE_SEQ))
            return -1;
        m->seq = 0;
        if (!t || n == 0 || n > 16) /* "" is 0 to the Python path */
            s->unsupported = 1;
        for (uint32_t i = 0; t && i < n && i < 16; i++) {
            if (t[i] < '0' || t[i] > '9')
                s->unsupported = 1;
            m->seq = m->seq * 10 + (t[i] - '0');
        }
        if (m->seq > 9000000000000000LL) /* its ns must stay in an int64 */
            s->unsupported = 1;
        m->ts_ns = s->unsupported ? 0 : m->seq * 1000;
        return 0;
    }
    return 1;
}

static const struct reader BITSTAMP_DATA_READER = {BITSTAMP_DATA, bitstamp_data};
/* read once (seen_once): so not in a table of Bitstamp's top level */
static const struct field BITSTAMP_DATA_FIELD =
    NESTED_FIELD("data", '{', HAVE_DATA, &BITSTAMP_DATA_READER);

static int bitstamp_top(struct scan *s, struct wsgw_book *b, struct msg *m, const uint8_t *k,
                        uint32_t klen)
{
    static const struct member_key keys[] = {
        {"data", HAVE_DATA}, {"channel", HAVE_KIND}, {"event", HAVE_ARG}, {NULL, 0}};
    unsigned bit = seen_once(s, m, keys, k, klen);
    if (bit == 0)
        return 1;
    if (bit == HAVE_DATA)
        return nested_member(s, b, m, &BITSTAMP_DATA_FIELD);
    if (bit == HAVE_ARG)
        return str_member(s, m, &m->action, &m->action_len, HAVE_ARG);
    if (str_member(s, m, &m->kind, &m->kind_len, HAVE_KIND))
        return -1;
    if (m->kind) { /* the pair is what follows the channel's last '_' */
        const uint8_t *sym = m->kind + m->kind_len;
        while (sym > m->kind && sym[-1] != '_')
            sym--;
        m->sym = sym;
        m->sym_len = (uint32_t)(m->kind + m->kind_len - sym);
        m->have |= HAVE_SYM;
    }
    return 0;
}

/* Is the message one the venue's delta path takes (the Python normalizer's tests)? */
static int is_delta(const struct wsgw_book *b, const struct msg *m)
{
    const unsigned levels = HAVE_SYM | HAVE_BIDS | HAVE_ASKS | HAVE_SEQ | HAVE_DATA | HAVE_KIND;
    if (b->venue == WSGW_BOOK_BITSTAMP)
        return (m->have & (levels | HAVE_ARG)) == (levels | HAVE_ARG) &&
               key_is(m->action, m->action_len, "data") &&
               starts_with(m->kind, m->kind_len, "diff_order_book_");
    if (b->venue == WSGW_BOOK_COINBASE)
        return (m->have & (HAVE_KIND | HAVE_SYM | HAVE_BIDS | HAVE_TS)) ==
                   (HAVE_KIND | HAVE_SYM | HAVE_BIDS | HAVE_TS) &&
               key_is(m->action, m->action_len, "l2update");
    if (b->venue == WSGW_BOOK_KRAKEN) /* one book element; "snapshot" is the Python path's */
        return (m->have & (levels & ~(unsigned)HAVE_SEQ)) == (levels & ~(unsigned)HAVE_SEQ) &&
               m->items == 1 && key_is(m->kind, m->kind_len, "book") &&
               key_is(m->action, m->action_len, "update");
    if ((m->have & levels) != levels)
        return 0;
    if (b->venue == WSGW_BOOK_BINANCE) {
        /* the stream kind follows the first '@', up to the next: "depth" only (the
         * partial-depth streams are snapshots; the raw endpoint has no envelope) */
        const uint8_t *at = memchr(m->kind, '@', m->kind_len), *stop = m->kind + m->kind_len;
        if (!at || (m->have & (HAVE_TS | HAVE_FIRST)) != (HAVE_TS | HAVE_FIRST))
            return 0;
        const uint8_t *next = memchr(at + 1, '@', (size_t)(stop - at - 1));
        return key_is(at + 1, (uint32_t)((next ? next : stop) - at - 1), "depth");
    }
    if (b->venue == WSGW_BOOK_OKX)
        return (m->have & (HAVE_ARG | HAVE_TS)) == (HAVE_ARG | HAVE_TS) && m->items == 1 &&
               key_is(m->action, m->action_len, "update") &&
               (starts_with(m->kind, m->kind_len, "books") || starts_with(m->kind, m->kind_len, "bbo"));
    /* Bybit: the topic's first part is "orderbook"; anything but a snapshot is a delta */
    const uint8_t *dot = memchr(m->kind, '.', m->kind_len);
    return key_is(m->kind, (uint32_t)((dot ? dot : m->kind + m->kind_len) - m->kind), "orderbook") &&
           !key_is(m->action, m->action_len, "snapshot");
}

/* ---- the book ------------------------------------------------------------------------- */
static void side_init(struct side *sd, int sign)
{
    memset(sd, 0, sizeof(*sd));
    sd->sign = sign;
}

/* Index of the first level whose sign*px >= key. */
static inline uint32_t side_find(const struct side *sd, int64_t key)
{
    uint32_t lo = 0, hi = sd->n;
    /* Most updates land near the touch, at the end: look there first. */
    if (hi && sd->sign * sd->v[hi - 1].px < key)
        return hi;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (sd->sign * sd->v[mid].px < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int side_reserve(struct side *sd, uint32_t extra)
{
    if (sd->n + extra <= sd->cap)
        return 0;
    uint32_t cap = sd->cap ? sd->cap : 256;
    while (cap < sd->n + extra)
        cap *= 2;
    struct level *v = realloc(sd->v, (size_t)cap * sizeof(*v));
    if (!v)
        return -1;
    sd->v = v;
    sd->cap = cap;
    return 0;
}

/* Absolute size at px; room for one more level has been reserved. */
static void side_set(struct side *sd, const struct level *lv)
{
    int64_t key = sd->sign * lv->px;
    uint32_t i = side_find(sd, key);
    int found = i < sd->n && sd->v[i].px == lv->px;
    if (lv->sz == 0) {
        if (found) {
            memmove(&sd->v[i], &sd->v[i + 1], (size_t)(sd->n - i - 1) * sizeof(*sd->v));
            sd->n--;
        }
        return;
    }
    if (!found) {
        memmove(&sd->v[i + 1], &sd->v[i], (size_t)(sd->n - i) * sizeof(*sd->v));
        sd->n++;
    }
    sd->v[i] = *lv;
}

/* Scale every level of the book from old to new digits (prices or sizes). */
static void rescale(struct wsgw_book *b, int prices, uint32_t to)
{
    for (int s = 0; s < 2; s++) {
        struct side *sd = &b->sides[s];
        for (uint32_t i = 0; i < sd->n; i++) {
            if (prices)
                sd->v[i].px *= POW10[to - b->pscale];
            else
                sd->v[i].sz *= POW10[to - b->sscale];
        }
    }
    if (prices)
        b->pscale = to;
    else
        b->sscale = to;
}

static int fits(const struct wsgw_book *b, int prices, uint32_t to)
{
    uint32_t from = prices ? b->pscale : b->sscale;
    int64_t limit = POW10[MAX_DIGITS - (to - from)];
    for (int s = 0; s < 2; s++) {
        const struct side *sd = &b->sides[s];
        for (uint32_t i = 0; i < sd->n; i++)
            if ((prices ? sd->v[i].px : sd->v[i].sz) >= limit)
                return 0;
    }
    return 1;
}

/* Make the pending levels representable (widen a scale if they carry more digits) and room
 * for them; 0, or WSGW_BOOK_UNSUPPORTED with the book unchanged. */
static int prepare(struct wsgw_book *b, const struct pending *pds, int n_sides)
{
    uint32_t pf = b->pscale, sf = b->sscale;
    for (int s = 0; s < n_sides; s++)
        for (uint32_t i = 0; i < pds[s].n; i++) {
            const struct parsed *lv = &pds[s].v[i];
            if (lv->pf > pf)
                pf = lv->pf;
            if (lv->sf > sf)
                sf = lv->sf;
        }
    for (int s = 0; s < n_sides; s++)
        for (uint32_t i = 0; i < pds[s].n; i++) {
            const struct parsed *lv = &pds[s].v[i];
            if (lv->pw + pf > MAX_DIGITS || lv->sw + sf > MAX_DIGITS)
                return WSGW_BOOK_UNSUPPORTED;
        }
    if ((pf > b->pscale && !fits(b, 1, pf)) || (sf > b->sscale && !fits(b, 0, sf)))
        return WSGW_BOOK_UNSUPPORTED;
    for (int s = 0; s < n_sides; s++)
        if (side_reserve(&b->sides[s], pds[s].n))
            return WSGW_BOOK_UNSUPPORTED;
    if (pf > b->pscale)
        rescale(b, 1, pf);
    if (sf > b->sscale)
        rescale(b, 0, sf);
    return 0;
}

static void apply_pending(struct wsgw_book *b, int side, const struct pending *pd)
{
    struct side *sd = &b->sides[side];
    for (uint32_t i = 0; i < pd->n; i++) {
        const struct parsed *p = &pd->v[i];
        struct level lv;
        lv.px = scaled(p->p, p->pw, p->pf, p->pdot, b->pscale);
        lv.sz = scaled(p->q, p->sw, p->sf, p->sdot, b->sscale);
        lv.plen = (uint8_t)p->plen;
        lv.tlen = (uint8_t)(p->plen + 1 + p->qlen);
        memcpy(lv.text, p->p, p->plen);
        lv.text[p->plen] = ':';
        memcpy(lv.text + p->plen + 1, p->q, p->qlen);
        side_set(sd, &lv);
    }
}

WSGW_API struct wsgw_book *wsgw_book_new(uint32_t venue, const char *symbol, uint32_t symbol_len)
{
    if (venue < WSGW_BOOK_BINANCE || venue > WSGW_BOOK_BITSTAMP) {
        wsgw_set_error("book: venue %u is not done in C", venue);
        return NULL;
    }
    if (symbol_len >= WSGW_BOOK_SYMBOL_MAX) {
        wsgw_set_error("book: symbol longer than %d bytes", WSGW_BOOK_SYMBOL_MAX - 1);
        return NULL;
    }
    struct wsgw_book *b = calloc(1, sizeof(*b));
    if (!b) {
        wsgw_set_error("book: out of memory");
        return NULL;
    }
    b->venue = venue;
    b->symbol_len = symbol_len;
    memcpy(b->symbol, symbol, symbol_len);
    side_init(&b->sides[WSGW_BOOK_BIDS], 1);
    side_init(&b->sides[WSGW_BOOK_ASKS], -1);
    return b;
}

WSGW_API void wsgw_book_free(struct wsgw_book *b)
{
    if (!b)
        return;
    for (int s = 0; s < 2; s++) {
        free(b->sides[s].v);
        free(b->pending[s].v);
    }
    free(b);
}

WSGW_API void wsgw_book_clear(struct wsgw_book *b)
{
    b->sides[0].n = b->sides[1].n = 0;
    b->seq = 0;
    b->joined = 0;
}

WSGW_API int64_t wsgw_book_seq(const struct wsgw_book *b) { return b->seq; }
WSGW_API void wsgw_book_set_seq(struct wsgw_book *b, int64_t seq) { b->seq = seq; }
WSGW_API void wsgw_book_set_joined(struct wsgw_book *b, int joined) { b->joined = joined != 0; }
WSGW_API void wsgw_book_set_depth(struct wsgw_book *b, uint32_t depth) { b->depth = depth; }

WSGW_API uint32_t wsgw_book_count(const struct wsgw_book *b, uint32_t side)
{
    return side < 2 ? b->sides[side].n : 0;
}

WSGW_API uint32_t wsgw_book_scale(const struct wsgw_book *b, uint32_t which)
{
    return which == 0 ? b->pscale : b->sscale;
}

WSGW_API int wsgw_book_update(struct wsgw_book *b, uint32_t side, const char *json, uint32_t len)
{
    struct scan s = {(const uint8_t *)json, (const uint8_t *)json + len, 0, 0};
    struct pending pd[2] = {{0}, {0}};
    if (side > 1)
        return WSGW_BOOK_UNSUPPORTED;
    skip_ws(&s);
    if (read_levels(&s, &b->pending[side], 0))
        return s.err == E_DEEP ? WSGW_BOOK_TOO_DEEP : WSGW_BOOK_MALFORMED;
    skip_ws(&s);
    if (s.p != s.end)
        return WSGW_BOOK_MALFORMED;
    if (s.unsupported)
        return WSGW_BOOK_UNSUPPORTED;
    pd[side] = b->pending[side];
    int rc = prepare(b, pd, 2);
    if (rc)
        return rc;
    apply_pending(b, (int)side, &b->pending[side]);
    return WSGW_BOOK_APPLIED;
}

WSGW_API void wsgw_book_truncate(struct wsgw_book *b, uint32_t depth)
{
    for (int s = 0; s < 2; s++) {
        struct side *sd = &b->sides[s];
        if (sd->n > depth) {
            memmove(sd->v, &sd->v[sd->n - depth], (size_t)depth * sizeof(*sd->v));
            sd->n = depth;
        }
    }
}

WSGW_API int64_t wsgw_book_top_json(const struct wsgw_book *b, uint32_t side, uint32_t n, char *out,
                                    uint32_t cap)
{
    if (side > 1)
        return 0;
    const struct side *sd = &b->sides[side];
    if (n > sd->n)
        n = sd->n;
    /* 2 * (18 digits + a dot) + 8 bytes of punctuation per level */
    int64_t need = 2 + (int64_t)n * 48;
    if (need > cap)
        return -need;
    char *o = out;
    *o++ = '[';
    for (uint32_t i = 0; i < n; i++) {
        const struct level *lv = &sd->v[sd->n - 1 - i];
        if (i)
            *o++ = ',';
        *o++ = '[';
        *o++ = '"';
        memcpy(o, lv->text, lv->plen);
        o += lv->plen;
        memcpy(o, "\",\"", 3);
        o += 3;
        memcpy(o, lv->text + lv->plen + 1, (size_t)(lv->tlen - lv->plen - 1));
        o += lv->tlen - lv->plen - 1;
        *o++ = '"';
        *o++ = ']';
    }
    *o++ = ']';
    return o - out;
}

/* ---- the normalized delta: schema.py's BookDelta in JSON and in MessagePack --------------- */
static char *put_bytes(char *o, const void *p, size_t n)
{
    memcpy(o, p, n);
    return o + n;
}

#define PUT_LIT(o, text) put_bytes((o), (text), sizeof(text) - 1)

static char *put_int(char *o, int64_t v)
{
    char digits[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (v < 0)
        *o++ = '-';
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n)
        *o++ = digits[--n];
    return o;
}

static char *json_levels(char *o, const struct pending *pd)
{
    *o++ = '[';
    for (uint32_t i = 0; i < pd->n; i++) {
        const struct parsed *lv = &pd->v[i];
        if (i)
            *o++ = ',';
        o = PUT_LIT(o, "[\"");
        o = put_bytes(o, lv->p, lv->plen);
        o = PUT_LIT(o, "\",\"");
        o = put_bytes(o, lv->q, lv->qlen);
        o = PUT_LIT(o, "\"]");
    }
    *o++ = ']';
    return o;
}

static char *mp_str(char *o, const void *p, uint32_t n)
{
    if (n < 32)
        *o++ = (char)(0xa0 | n);
    else if (n < 256) {
        *o++ = (char)0xd9;
        *o++ = (char)n;
    } else {
        *o++ = (char)0xda;
        *o++ = (char)(n >> 8);
        *o++ = (char)n;
    }
    return put_bytes(o, p, n);
}

static char *mp_array(char *o, uint32_t n)
{
    if (n < 16)
        *o++ = (char)(0x90 | n);
    else if (n < 65536) {
        *o++ = (char)0xdc;
        *o++ = (char)(n >> 8);
        *o++ = (char)n;
    } else {
        *o++ = (char)0xdd;
        for (int sh = 24; sh >= 0; sh -= 8)
            *o++ = (char)(n >> sh);
    }
    return o;
}

static char *mp_be(char *o, uint8_t tag, uint64_t v, int bytes)
{
    *o++ = (char)tag;
    for (int sh = 8 * (bytes - 1); sh >= 0; sh -= 8)
        *o++ = (char)(v >> sh);
    return o;
}

/* The smallest MessagePack form of an integer, as msgspec writes it. */
static char *mp_int(char *o, int64_t v)
{
    if (v >= 0) {
        if (v < 128)
            *o++ = (char)v;
        else if (v <= 0xff)
            o = mp_be(o, 0xcc, (uint64_t)v, 1);
        else if (v <= 0xffff)
            o = mp_be(o, 0xcd, (uint64_t)v, 2);
        else if (v <= 0xffffffffLL)
            o = mp_be(o, 0xce, (uint64_t)v, 4);
        else
            o = mp_be(o, 0xcf, (uint64_t)v, 8);
    } else if (v >= -32)
        *o++ = (char)(int8_t)v;
    else if (v >= -128)
        o = mp_be(o, 0xd0, (uint64_t)v, 1);
    else if (v >= -32768)
        o = mp_be(o, 0xd1, (uint64_t)v, 2);
    else if (v >= -2147483648LL)
        o = mp_be(o, 0xd2, (uint64_t)v, 4);
    else
        o = mp_be(o, 0xd3, (uint64_t)v, 8);
    return o;
}

static char *mp_levels(char *o, const struct pending *pd)
{
    o = mp_array(o, pd->n);
    for (uint32_t i = 0; i < pd->n; i++) {
        *o++ = (char)0x92;
        o = mp_str(o, pd->v[i].p, pd->v[i].plen);
        o = mp_str(o, pd->v[i].q, pd->v[i].qlen);
    }
    return o;
}

static const char *const VENUE_NAMES[] = {"", "binance", "okx", "bybit", "kraken", "coinbase",
                                            "bitstamp"};

static uint32_t emit(const struct wsgw_book *b, const struct msg *m, int64_t recv_ns, uint32_t flags,
                     char *out, int64_t *info)
{
    const struct pending *bids = &b->pending[WSGW_BOOK_BIDS], *asks = &b->pending[WSGW_BOOK_ASKS];
    const char *venue = VENUE_NAMES[b->venue];
    int has_crc = (m->have & HAVE_CRC) != 0;
    char *o = out;
    int64_t venue_ts = b->venue >= WSGW_BOOK_KRAKEN ? m->ts_ns : m->ts_ms * 1000000;
    if (flags & WSGW_BOOK_OUT_JSON) {
        o = PUT_LIT(o, "{\"type\":\"delta\",\"venue\":\"");
        o = put_bytes(o, venue, strlen(venue));
        o = PUT_LIT(o, "\",\"symbol\":\"");
        o = put_bytes(o, m->sym, m->sym_len);
        o = PUT_LIT(o, "\",\"bids\":");
        o = json_levels(o, bids);
        o = PUT_LIT(o, ",\"asks\":");
        o = json_levels(o, asks);
        o = PUT_LIT(o, ",\"first_seq\":");
        o = put_int(o, m->first);
        o = PUT_LIT(o, ",\"seq\":");
        o = put_int(o, m->seq);
        o = PUT_LIT(o, ",\"prev_seq\":");
        o = put_int(o, m->prev);
        o = PUT_LIT(o, ",\"venue_ts_ns\":");
        o = put_int(o, venue_ts);
        o = PUT_LIT(o, ",\"recv_ns\":");
        o = put_int(o, recv_ns);
        o = PUT_LIT(o, ",\"checksum\":");
        if (has_crc)
            o = put_int(o, m->crc);
        else
            o = PUT_LIT(o, "null");
        *o++ = '}';
    }
    info[WSGW_BOOK_INFO_JSON_LEN] = o - out;
    char *bin = o;
    if (flags & WSGW_BOOK_OUT_BINARY) {
        o = mp_array(o, 11);
        *o++ = 3; /* the delta's tag */
        o = mp_str(o, venue, (uint32_t)strlen(venue));
        o = mp_str(o, m->sym, m->sym_len);
        o = mp_levels(o, bids);
        o = mp_levels(o, asks);
        o = mp_int(o, m->first);
        o = mp_int(o, m->seq);
        o = mp_int(o, m->prev);
        o = mp_int(o, venue_ts);
        o = mp_int(o, recv_ns);
        if (has_crc)
            o = mp_int(o, m->crc);
        else
            *o++ = (char)0xc0; /* nil */
    }
    info[WSGW_BOOK_INFO_BINARY_LEN] = o - bin;
    return (uint32_t)(o - out);
}

static int64_t out_bound(const struct wsgw_book *b, const struct msg *m)
{
    int64_t n = 2 * (360 + m->sym_len);
    for (int s = 0; s < 2; s++)
        for (uint32_t i = 0; i < b->pending[s].n; i++)
            n += 2 * ((int64_t)b->pending[s].v[i].plen + b->pending[s].v[i].qlen + 10);
    return n;
}

/* ---- checksums ------------------------------------------------------------------------- */
/* CRC-32 (the zlib polynomial), slicing by 8: eight table lookups per 8 bytes instead of a
 * chain of one per byte (the byte loop was most of an OKX message's time). */
static uint32_t crc_tables[8][256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tables[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_tables[t][i] = (crc_tables[t - 1][i] >> 8) ^ crc_tables[0][crc_tables[t - 1][i] & 0xff];
}

static uint32_t crc32_update(uint32_t crc, const char *text, size_t n)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    const uint8_t *p = (const uint8_t *)text;
    pthread_once(&once, crc_init);
    crc = ~crc;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = crc_tables[7][lo & 0xff] ^ crc_tables[6][(lo >> 8) & 0xff] ^
              crc_tables[5][(lo >> 16) & 0xff] ^ crc_tables[4][lo >> 24] ^
              crc_tables[3][hi & 0xff] ^ crc_tables[2][(hi >> 8) & 0xff] ^
              crc_tables[1][(hi >> 16) & 0xff] ^ crc_tables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
#endif
    while (n--)
        crc = crc_tables[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* OKX: CRC32 of "bid:size:ask:size:..." over the top 25 of each side, alternating by rank
 * (https://www.okx.com/docs-v5/en/#order-book-trading-market-data-ws-order-book-channel,
 * "Checksum"), as a signed 32-bit integer. */
static int64_t okx_checksum(const struct wsgw_book *b)
{
    char text[25 * 2 * 48];
    char *o = text;
    const struct side *bids = &b->sides[WSGW_BOOK_BIDS], *asks = &b->sides[WSGW_BOOK_ASKS];
    uint32_t nb = bids->n < 25 ? bids->n : 25, na = asks->n < 25 ? asks->n : 25;
    for (uint32_t i = 0; i < nb || i < na; i++)
        for (int s = 0; s < 2; s++) {
            const struct side *sd = s ? asks : bids;
            if (i >= (s ? na : nb))
                continue;
            const struct level *lv = &sd->v[sd->n - 1 - i];
            if (o != text)
                *o++ = ':';
            memcpy(o, lv->text, lv->tlen);
            o += lv->tlen;
        }
    return (int32_t)crc32_update(0, text, (size_t)(o - text));
}

/* Kraken: CRC32 of the top 10 asks then the top 10 bids, best first, each level's price and
 * quantity digits without the dot and the leading zeros, unsigned. */
static int64_t kraken_checksum(const struct wsgw_book *b)
{
    char text[20 * 48];
    char *o = text;
    for (int s = WSGW_BOOK_ASKS; s >= WSGW_BOOK_BIDS; s--) {
        const struct side *sd = &b->sides[s];
        uint32_t n = sd->n < 10 ? sd->n : 10;
        for (uint32_t i = 0; i < n; i++) {
            const struct level *lv = &sd->v[sd->n - 1 - i];
            const char *parts[2] = {lv->text, lv->text + lv->plen + 1};
            const char *ends[2] = {lv->text + lv->plen, lv->text + lv->tlen};
            for (int j = 0; j < 2; j++) {
                int leading = 1;
                for (const char *c = parts[j]; c < ends[j]; c++) {
                    if (*c == '.' || (leading && *c == '0'))
                        continue;
                    leading = 0;
                    *o++ = *c;
                }
            }
        }
    }
    return (int64_t)crc32_update(0, text, (size_t)(o - text));
}

/* By venue (WSGW_BOOK_BINANCE = 1 ...): the top level of its messages. */
static const struct reader TOP_READERS[] = {
    {NULL, NULL},
    {BINANCE_TOP, NULL},
    {OKX_TOP, NULL},
    {BYBIT_TOP, NULL},
    {KRAKEN_TOP, kraken_top},
    {NULL, coinbase_top},
    {NULL, bitstamp_top},
};

WSGW_API int wsgw_book_on_message(struct wsgw_book *b, const char *msg, uint32_t len, int64_t recv_ns,
                                  uint32_t flags, char *out, uint32_t cap, int64_t *info)
{
    struct scan s = {(const uint8_t *)msg, (const uint8_t *)msg + len, 0, 0};
    struct msg m;
    memset(&m, 0, sizeof(m));
    memset(info, 0, WSGW_BOOK_INFO_N * sizeof(*info));
    b->pending[0].n = b->pending[1].n = 0;
    skip_ws(&s);
    if (s.p >= s.end || *s.p != '{' || read_object(&s, b, &m, &TOP_READERS[b->venue]))
        return s.err == E_DEEP ? WSGW_BOOK_TOO_DEEP : WSGW_BOOK_MALFORMED;
    skip_ws(&s);
    if (s.p != s.end)
        return WSGW_BOOK_MALFORMED;
    if (s.unsupported || !is_delta(b, &m) || m.ts_ms > 9000000000000LL || m.ts_ms < -9000000000000LL)
        return WSGW_BOOK_UNSUPPORTED;
    info[WSGW_BOOK_INFO_FIRST_SEQ] = m.first;
    info[WSGW_BOOK_INFO_SEQ] = m.seq;
    info[WSGW_BOOK_INFO_PREV_SEQ] = m.prev;
    if (m.sym_len != b->symbol_len || memcmp(m.sym, b->symbol, m.sym_len) != 0)
        return WSGW_BOOK_OTHER_SYMBOL;
    if (!b->joined)
        return WSGW_BOOK_NOT_JOINED;
    switch (b->venue) {
    case WSGW_BOOK_BINANCE: /* u <= the book's: old; then U = u + 1 (USD-M: pu = u) */
        if (m.seq <= b->seq)
            return WSGW_BOOK_IGNORED;
        if (m.prev ? m.prev != b->seq : m.first != b->seq + 1)
            return WSGW_BOOK_GAP;
        break;
    case WSGW_BOOK_OKX: /* prevSeqId = the book's seqId; an older one is a duplicate */
        if (m.prev != b->seq)
            return m.seq <= b->seq && m.prev < b->seq ? WSGW_BOOK_IGNORED : WSGW_BOOK_GAP;
        break;
    case WSGW_BOOK_KRAKEN: /* no sequence: the checksum is the check */
    case WSGW_BOOK_COINBASE: /* no sequence, no checksum */
        m.seq = b->seq;
        break;
    case WSGW_BOOK_BITSTAMP: /* microtimestamps: an older one is out of order */
        if (m.seq < b->seq)
            return WSGW_BOOK_GAP;
        break;
    default: /* Bybit: u = the book's + 1 */
        if (m.seq <= b->seq)
            return WSGW_BOOK_IGNORED;
        if (m.seq != b->seq + 1)
            return WSGW_BOOK_GAP;
    }
    int64_t need = out_bound(b, &m);
    if (need > cap) {
        info[WSGW_BOOK_INFO_JSON_LEN] = need;
        return WSGW_BOOK_NO_SPACE;
    }
    int rc = prepare(b, b->pending, 2);
    if (rc)
        return rc;
    apply_pending(b, WSGW_BOOK_BIDS, &b->pending[WSGW_BOOK_BIDS]);
    apply_pending(b, WSGW_BOOK_ASKS, &b->pending[WSGW_BOOK_ASKS]);
    b->seq = m.seq;
    if (b->depth)
        wsgw_book_truncate(b, b->depth);
    if ((b->venue == WSGW_BOOK_OKX || b->venue == WSGW_BOOK_KRAKEN) && (m.have & HAVE_CRC)) {
        int64_t got = b->venue == WSGW_BOOK_OKX ? okx_checksum(b) : kraken_checksum(b);
        if (got != m.crc) {
            info[WSGW_BOOK_INFO_CRC_EXPECTED] = m.crc;
            info[WSGW_BOOK_INFO_CRC_GOT] = got;
            return WSGW_BOOK_CHECKSUM;
        }
    }
    emit(b, &m, recv_ns, flags, out, info);
    return WSGW_BOOK_APPLIED;
}

WSGW_API uint32_t wsgw_book_on_batch(struct wsgw_book *b, const char *blob, const uint32_t *offsets,
                                     uint32_t n, const int64_t *recv_ns, uint32_t flags, char *out,
                                     uint32_t cap, int64_t *lens, int8_t *statuses)
{
    int64_t info[WSGW_BOOK_INFO_N];
    uint32_t used = 0;
    for (uint32_t i = 0; i < n; i++) {
        int rc = wsgw_book_on_message(b, blob + offsets[i], offsets[i + 1] - offsets[i], recv_ns[i],
                                      flags, out + used, cap - used, info);
        statuses[i] = (int8_t)rc;
        if (rc != WSGW_BOOK_APPLIED && rc != WSGW_BOOK_IGNORED) {
            lens[2 * i] = rc == WSGW_BOOK_NO_SPACE ? info[WSGW_BOOK_INFO_JSON_LEN]
                                                   : info[WSGW_BOOK_INFO_CRC_EXPECTED];
            lens[2 * i + 1] = info[WSGW_BOOK_INFO_CRC_GOT];
            return i;
        }
        lens[2 * i] = info[WSGW_BOOK_INFO_JSON_LEN];
        lens[2 * i + 1] = info[WSGW_BOOK_INFO_BINARY_LEN];
        used += (uint32_t)(lens[2 * i] + lens[2 * i + 1]);
    }
    return n;
}
