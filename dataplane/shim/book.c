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
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

struct level {
    int64_t px, sz; /* at the book's price and size scales */
    uint8_t pf, sf; /* fraction digits of the texts */
    uint8_t pdot, sdot;
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

/* At an opening quote: the string's bytes between the quotes; *plain is 0 when it holds an
 * escape or a non-ASCII byte (which only the Python path decodes). */
static int read_string(struct scan *s, const uint8_t **out, uint32_t *len, int *plain)
{
    const uint8_t *p = s->p + 1, *start = p;
    *plain = 1;
    for (;;) {
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
    if (p < end && !strchr(" \t\r\n,]}", *p))
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
    if (s->p < s->end && !strchr(" \t\r\n,]}", *s->p))
        return bad(s);
    return 0;
}

/* After an opening bracket: the members up to the closing one. */
static int skip_container(struct scan *s, int depth, uint8_t close)
{
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
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
        skip_ws(s);
        if (s->p >= s->end)
            return bad(s);
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p != close)
            return bad(s);
        s->p++;
        return 0;
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

/* At '[': `[["p","q"],...]` into pd. A value of another shape is skipped and marks the
 * message unsupported. */
static int read_levels(struct scan *s, struct pending *pd, int depth)
{
    const uint8_t *start = s->p;
    pd->n = 0;
    if (s->p >= s->end || *s->p != '[')
        goto other;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
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
        if (s->p >= s->end || *s->p != ']')
            goto other;
        s->p++;
        if (!plain_p || !plain_q ||
            decimal_shape(lv.p, lv.plen, &lv.pw, &lv.pf, &lv.pdot) ||
            decimal_shape(lv.q, lv.qlen, &lv.sw, &lv.sf, &lv.sdot))
            s->unsupported = 1;
        if (pending_push(pd, &lv)) {
            s->err = E_MALFORMED; /* out of memory: refuse the message whole */
            wsgw_set_error("book: out of memory for %u levels", pd->n);
            return -1;
        }
        skip_ws(s);
        if (s->p >= s->end)
            return bad(s);
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p != ']')
            return bad(s);
        s->p++;
        return 0;
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

/* The fields of a Binance depthUpdate object. */
struct depth {
    int64_t E, U, u, pu;
    unsigned have; /* bits: 1 E, 2 U, 4 u, 8 s, 16 b, 32 a */
    const uint8_t *sym;
    uint32_t sym_len;
};

static int read_int_member(struct scan *s, int64_t *out, unsigned *have, unsigned bit)
{
    if (s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
        int is_int;
        if (read_number(s, out, &is_int))
            return -1;
        if (!is_int)
            s->unsupported = 1;
        *have |= bit;
        return 0;
    }
    s->unsupported = 1; /* not an integer: Python's decoder refuses it */
    return skip_value(s, 1);
}

static int read_depth(struct scan *s, struct wsgw_book *b, struct depth *d)
{
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    for (;;) {
        const uint8_t *k;
        uint32_t klen;
        int plain, rc;
        skip_ws(s);
        if (s->p >= s->end || *s->p != '"' || read_string(s, &k, &klen, &plain))
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
        if (klen == 1 && k[0] == 'E')
            rc = read_int_member(s, &d->E, &d->have, 1);
        else if (klen == 1 && k[0] == 'U')
            rc = read_int_member(s, &d->U, &d->have, 2);
        else if (klen == 1 && k[0] == 'u')
            rc = read_int_member(s, &d->u, &d->have, 4);
        else if (key_is(k, klen, "pu")) {
            unsigned ignored = 0;
            rc = read_int_member(s, &d->pu, &ignored, 1);
        } else if (klen == 1 && k[0] == 's') {
            if (*s->p == '"') {
                rc = read_string(s, &d->sym, &d->sym_len, &plain);
                if (!plain)
                    s->unsupported = 1;
                d->have |= 8;
            } else {
                s->unsupported = 1;
                rc = skip_value(s, 1);
            }
        } else if (klen == 1 && (k[0] == 'b' || k[0] == 'a')) {
            int side = k[0] == 'b' ? WSGW_BOOK_BIDS : WSGW_BOOK_ASKS;
            rc = read_levels(s, &b->pending[side], 1);
            d->have |= side == WSGW_BOOK_BIDS ? 16 : 32;
        } else
            rc = skip_value(s, 1);
        if (rc)
            return -1;
        skip_ws(s);
        if (s->p >= s->end)
            return bad(s);
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p != '}')
            return bad(s);
        s->p++;
        return 0;
    }
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
        struct level lv = {
            .px = scaled(p->p, p->pw, p->pf, p->pdot, b->pscale),
            .sz = scaled(p->q, p->sw, p->sf, p->sdot, b->sscale),
            .pf = p->pf,
            .sf = p->sf,
            .pdot = p->pdot,
            .sdot = p->sdot,
        };
        side_set(sd, &lv);
    }
}

WSGW_API struct wsgw_book *wsgw_book_new(uint32_t venue, const char *symbol, uint32_t symbol_len)
{
    if (venue != WSGW_BOOK_BINANCE) {
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

/* The venue's text of a value at scale with frac fraction digits. */
static char *put_decimal(char *o, int64_t v, uint32_t scale, uint8_t frac, uint8_t dot)
{
    char digits[24];
    int64_t whole = v / POW10[scale], rest = v % POW10[scale];
    int n = 0;
    do {
        digits[n++] = (char)('0' + whole % 10);
        whole /= 10;
    } while (whole);
    while (n)
        *o++ = digits[--n];
    if (dot) {
        *o++ = '.';
        for (uint32_t i = 0; i < frac; i++)
            *o++ = (char)('0' + (rest / POW10[scale - 1 - i]) % 10);
    }
    return o;
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
        o = put_decimal(o, lv->px, b->pscale, lv->pf, lv->pdot);
        *o++ = '"';
        *o++ = ',';
        *o++ = '"';
        o = put_decimal(o, lv->sz, b->sscale, lv->sf, lv->sdot);
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

static const char VENUE[] = "binance";

static uint32_t emit(const struct wsgw_book *b, const struct depth *d, int64_t recv_ns, uint32_t flags,
                     char *out, int64_t *info)
{
    const struct pending *bids = &b->pending[WSGW_BOOK_BIDS], *asks = &b->pending[WSGW_BOOK_ASKS];
    char *o = out;
    int64_t venue_ts = d->E * 1000000;
    if (flags & WSGW_BOOK_OUT_JSON) {
        o = PUT_LIT(o, "{\"type\":\"delta\",\"venue\":\"binance\",\"symbol\":\"");
        o = put_bytes(o, d->sym, d->sym_len);
        o = PUT_LIT(o, "\",\"bids\":");
        o = json_levels(o, bids);
        o = PUT_LIT(o, ",\"asks\":");
        o = json_levels(o, asks);
        o = PUT_LIT(o, ",\"first_seq\":");
        o = put_int(o, d->U);
        o = PUT_LIT(o, ",\"seq\":");
        o = put_int(o, d->u);
        o = PUT_LIT(o, ",\"prev_seq\":");
        o = put_int(o, d->pu);
        o = PUT_LIT(o, ",\"venue_ts_ns\":");
        o = put_int(o, venue_ts);
        o = PUT_LIT(o, ",\"recv_ns\":");
        o = put_int(o, recv_ns);
        o = PUT_LIT(o, ",\"checksum\":null}");
    }
    info[WSGW_BOOK_INFO_JSON_LEN] = o - out;
    char *bin = o;
    if (flags & WSGW_BOOK_OUT_BINARY) {
        o = mp_array(o, 11);
        *o++ = 3; /* the delta's tag */
        o = mp_str(o, VENUE, sizeof(VENUE) - 1);
        o = mp_str(o, d->sym, d->sym_len);
        o = mp_levels(o, bids);
        o = mp_levels(o, asks);
        o = mp_int(o, d->U);
        o = mp_int(o, d->u);
        o = mp_int(o, d->pu);
        o = mp_int(o, venue_ts);
        o = mp_int(o, recv_ns);
        *o++ = (char)0xc0; /* checksum: nil */
    }
    info[WSGW_BOOK_INFO_BINARY_LEN] = o - bin;
    return (uint32_t)(o - out);
}

static int64_t out_bound(const struct wsgw_book *b, const struct depth *d)
{
    int64_t n = 2 * (320 + d->sym_len);
    for (int s = 0; s < 2; s++)
        for (uint32_t i = 0; i < b->pending[s].n; i++)
            n += 2 * ((int64_t)b->pending[s].v[i].plen + b->pending[s].v[i].qlen + 10);
    return n;
}

/* The combined-stream envelope `{"stream":"<sym>@depth[@100ms]","data":{...}}`. */
static int read_binance(struct scan *s, struct wsgw_book *b, struct depth *d)
{
    const uint8_t *stream = NULL;
    uint32_t stream_len = 0;
    int have_data = 0;
    skip_ws(s);
    if (s->p >= s->end || *s->p != '{')
        return bad(s);
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
    } else {
        for (;;) {
            const uint8_t *k;
            uint32_t klen;
            int plain, rc;
            skip_ws(s);
            if (s->p >= s->end || *s->p != '"' || read_string(s, &k, &klen, &plain))
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
            if (key_is(k, klen, "stream") && *s->p == '"') {
                rc = read_string(s, &stream, &stream_len, &plain);
                if (!plain)
                    s->unsupported = 1;
            } else if (key_is(k, klen, "data") && *s->p == '{') {
                memset(d, 0, sizeof(*d));
                b->pending[0].n = b->pending[1].n = 0;
                rc = read_depth(s, b, d);
                have_data = 1;
            } else {
                if (key_is(k, klen, "stream") || key_is(k, klen, "data"))
                    s->unsupported = 1;
                rc = skip_value(s, 1);
            }
            if (rc)
                return -1;
            skip_ws(s);
            if (s->p >= s->end)
                return bad(s);
            if (*s->p == ',') {
                s->p++;
                continue;
            }
            if (*s->p != '}')
                return bad(s);
            s->p++;
            break;
        }
    }
    skip_ws(s);
    if (s->p != s->end)
        return bad(s);
    /* The stream kind is what follows the first '@', up to the next: "depth" only (the
     * partial-depth streams are snapshots, the raw endpoint's events have no envelope). */
    const uint8_t *at = stream ? memchr(stream, '@', stream_len) : NULL;
    if (!at || !have_data) {
        s->unsupported = 1;
        return 0;
    }
    const uint8_t *kind = at + 1, *stop = stream + stream_len;
    const uint8_t *next = memchr(kind, '@', (size_t)(stop - kind));
    if (!key_is(kind, (uint32_t)((next ? next : stop) - kind), "depth") || (d->have & 63) != 63)
        s->unsupported = 1;
    if (d->E > 9000000000000LL || d->E < -9000000000000LL)
        s->unsupported = 1; /* E in ns would not fit */
    return 0;
}

WSGW_API int wsgw_book_on_message(struct wsgw_book *b, const char *msg, uint32_t len, int64_t recv_ns,
                                  uint32_t flags, char *out, uint32_t cap, int64_t *info)
{
    struct scan s = {(const uint8_t *)msg, (const uint8_t *)msg + len, 0, 0};
    struct depth d;
    memset(&d, 0, sizeof(d));
    memset(info, 0, WSGW_BOOK_INFO_N * sizeof(*info));
    if (read_binance(&s, b, &d))
        return s.err == E_DEEP ? WSGW_BOOK_TOO_DEEP : WSGW_BOOK_MALFORMED;
    if (s.unsupported)
        return WSGW_BOOK_UNSUPPORTED;
    info[WSGW_BOOK_INFO_FIRST_SEQ] = d.U;
    info[WSGW_BOOK_INFO_SEQ] = d.u;
    info[WSGW_BOOK_INFO_PREV_SEQ] = d.pu;
    if (d.sym_len != b->symbol_len || memcmp(d.sym, b->symbol, d.sym_len) != 0)
        return WSGW_BOOK_OTHER_SYMBOL;
    if (!b->joined)
        return WSGW_BOOK_NOT_JOINED;
    if (d.u <= b->seq)
        return WSGW_BOOK_IGNORED;
    if (d.pu ? d.pu != b->seq : d.U != b->seq + 1)
        return WSGW_BOOK_GAP;
    int64_t need = out_bound(b, &d);
    if (need > cap) {
        info[WSGW_BOOK_INFO_JSON_LEN] = need;
        return WSGW_BOOK_NO_SPACE;
    }
    int rc = prepare(b, b->pending, 2);
    if (rc)
        return rc;
    apply_pending(b, WSGW_BOOK_BIDS, &b->pending[WSGW_BOOK_BIDS]);
    apply_pending(b, WSGW_BOOK_ASKS, &b->pending[WSGW_BOOK_ASKS]);
    b->seq = d.u;
    emit(b, &d, recv_ns, flags, out, info);
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
            lens[2 * i] = rc == WSGW_BOOK_NO_SPACE ? info[WSGW_BOOK_INFO_JSON_LEN] : 0;
            return i;
        }
        lens[2 * i] = info[WSGW_BOOK_INFO_JSON_LEN];
        lens[2 * i + 1] = info[WSGW_BOOK_INFO_BINARY_LEN];
        used += (uint32_t)(lens[2 * i] + lens[2 * i + 1]);
    }
    return n;
}
