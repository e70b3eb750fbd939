/* Message identity in C: see wsgw_identity.h. Each dialect is one or two topic scans
 * (topic.c) of a few key paths, then checks of the kinds of what they found. */
#include <pthread.h>
#include <string.h>

#include "wsgw_identity.h"
#include "wsgw_topic.h"

enum {
    SPEC_BINANCE,       /* stream, data.e, data.t */
    SPEC_BINANCE_U,     /* data.U, data.u */
    SPEC_BINANCE_A,     /* data.a */
    SPEC_BYBIT,         /* topic, type, data.u */
    SPEC_OKX,           /* arg.channel, arg.instId, data[0].seqId, data[0].prevSeqId */
    SPEC_COINBASE,      /* type, product_id, sequence */
    N_SPECS,
};

static struct wsgw_topic_spec specs[N_SPECS];
static pthread_once_t specs_once = PTHREAD_ONCE_INIT;

/* "a.b" or "data[0].seqId" -> a path (keys are short ASCII here). */
static void add_path(struct wsgw_topic_spec *s, const char *text)
{
    struct wsgw_topic_path *p = &s->paths[s->n_paths++];
    const char *at = text;
    while (*at) {
        struct wsgw_topic_key *k = &p->keys[p->depth++];
        if (*at == '[') {
            k->is_index = 1;
            k->index = (uint16_t)(at[1] - '0');
            at += 3;
        } else {
            size_t n = strcspn(at, ".[");
            memcpy(k->name, at, n);
            k->len = (uint8_t)n;
            at += n;
        }
        if (*at == '.')
            at++;
    }
}

static void build_specs(void)
{
    /* Not strict: a scan stops once it found every path (a trade's `t` comes early), as
     * the feed's topic scan does; what follows is not checked (module doc). */
    add_path(&specs[SPEC_BINANCE], "stream");
    add_path(&specs[SPEC_BINANCE], "data.e");
    add_path(&specs[SPEC_BINANCE], "data.t");
    add_path(&specs[SPEC_BINANCE_U], "data.U");
    add_path(&specs[SPEC_BINANCE_U], "data.u");
    add_path(&specs[SPEC_BINANCE_A], "data.a");
    add_path(&specs[SPEC_BYBIT], "topic");
    add_path(&specs[SPEC_BYBIT], "type");
    add_path(&specs[SPEC_BYBIT], "data.u");
    add_path(&specs[SPEC_OKX], "arg.channel");
    add_path(&specs[SPEC_OKX], "arg.instId");
    add_path(&specs[SPEC_OKX], "data[0].seqId");
    add_path(&specs[SPEC_OKX], "data[0].prevSeqId");
    add_path(&specs[SPEC_COINBASE], "type");
    add_path(&specs[SPEC_COINBASE], "product_id");
    add_path(&specs[SPEC_COINBASE], "sequence");
}

/* A plain JSON integer in int64 (no fraction, no exponent): 1 and *v, else 0. */
static int int_of(const uint8_t *msg, const struct wsgw_topic_span *s, int64_t *v)
{
    if (s->kind != WSGW_JSON_NUMBER || s->length == 0 || s->length > 20)
        return 0;
    const uint8_t *p = msg + s->offset, *end = p + s->length;
    int neg = *p == '-';
    if (neg)
        p++;
    if (p == end || (*p == '0' && end - p > 1))
        return 0;
    uint64_t mag = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        uint64_t digit = (uint64_t)(*p - '0');
        if (mag > (UINT64_MAX - digit) / 10)
            return 0;
        mag = mag * 10 + digit;
    }
    /* INT64_MIN is not an id (the arbiter's NO_PREV): only -(2^63 - 1) .. 2^63 - 1 */
    if (mag > (uint64_t)INT64_MAX)
        return 0;
    *v = neg ? -(int64_t)mag : (int64_t)mag;
    return 1;
}

static int is_string(const struct wsgw_topic_span *s)
{
    return s->kind == WSGW_JSON_STRING;
}

static int string_is(const uint8_t *msg, const struct wsgw_topic_span *s, const char *text)
{
    size_t n = strlen(text);
    return is_string(s) && s->length == n && memcmp(msg + s->offset, text, n) == 0;
}

/* The identity's topic: a, or a + sep + b (sep 0: none), within WSGW_ID_TOPIC_MAX. */
static int set_topic(struct wsgw_identity *out, const char *a, size_t alen, char sep,
                     const char *b, size_t blen)
{
    size_t n = alen + (sep ? 1 + blen : 0);
    if (n == 0 || n > WSGW_ID_TOPIC_MAX)
        return 0;
    memcpy(out->topic, a, alen);
    if (sep) {
        out->topic[alen] = sep;
        memcpy(out->topic + alen + 1, b, blen);
    }
    out->topic_len = (uint32_t)n;
    return 1;
}

static int found(struct wsgw_identity *out, uint32_t kind, int64_t this_id, int64_t prev)
{
    out->kind = kind;
    out->this_id = this_id;
    out->prev = prev;
    return 1;
}

static int scan(int spec, const uint8_t *msg, uint32_t len, struct wsgw_topic_span *spans)
{
    int status = wsgw_topic_extract(&specs[spec], msg, len, spans);
    return status == WSGW_TOPIC_OK || status == WSGW_TOPIC_PARTIAL;
}

static int binance(const uint8_t *msg, uint32_t len, struct wsgw_identity *out)
{
    struct wsgw_topic_span sp[WSGW_TOPIC_MAX_PATHS], more[WSGW_TOPIC_MAX_PATHS];
    if (!scan(SPEC_BINANCE, msg, len, sp) || !is_string(&sp[0]) || sp[0].length == 0)
        return 0;
    if (!set_topic(out, (const char *)msg + sp[0].offset, sp[0].length, 0, NULL, 0))
        return 0;
    int64_t v, w;
    if (string_is(msg, &sp[1], "trade")) {
        if (int_of(msg, &sp[2], &v) && v != -INT64_MAX)
            return found(out, WSGW_ID_SEQUENCE, v, v - 1);
        return 0;
    }
    if (string_is(msg, &sp[1], "aggTrade")) {
        if (scan(SPEC_BINANCE_A, msg, len, more) && int_of(msg, &more[0], &v) &&
            v != -INT64_MAX)
            return found(out, WSGW_ID_SEQUENCE, v, v - 1);
        return 0;
    }
    if (string_is(msg, &sp[1], "depthUpdate")) {
        if (scan(SPEC_BINANCE_U, msg, len, more) && int_of(msg, &more[0], &w) &&
            w != -INT64_MAX && int_of(msg, &more[1], &v))
            return found(out, WSGW_ID_SEQUENCE, v, w - 1);
        return 0;
    }
    return 0;
}

static int bybit(const uint8_t *msg, uint32_t len, struct wsgw_identity *out)
{
    struct wsgw_topic_span sp[WSGW_TOPIC_MAX_PATHS];
    int64_t u;
    if (!scan(SPEC_BYBIT, msg, len, sp) || !is_string(&sp[0]) || sp[0].length == 0 ||
        !int_of(msg, &sp[2], &u) || u == -INT64_MAX)
        return 0;
    int snapshot;
    if (sp[1].kind == WSGW_JSON_ABSENT || sp[1].kind == WSGW_JSON_NULL)
        snapshot = 0;
    else if (is_string(&sp[1]))
        snapshot = string_is(msg, &sp[1], "snapshot");
    else
        return 0;
    if (!set_topic(out, (const char *)msg + sp[0].offset, sp[0].length, 0, NULL, 0))
        return 0;
    return found(out, WSGW_ID_SEQUENCE, u, snapshot || u == 1 ? WSGW_ID_NO_PREV : u - 1);
}

static int okx(const uint8_t *msg, uint32_t len, struct wsgw_identity *out)
{
    struct wsgw_topic_span sp[WSGW_TOPIC_MAX_PATHS];
    int64_t seq, prev = WSGW_ID_NO_PREV;
    if (!scan(SPEC_OKX, msg, len, sp) || !is_string(&sp[0]) || !is_string(&sp[1]) ||
        sp[0].length == 0 || sp[1].length == 0 || !int_of(msg, &sp[2], &seq))
        return 0;
    if (sp[3].kind != WSGW_JSON_ABSENT && sp[3].kind != WSGW_JSON_NULL) {
        if (!int_of(msg, &sp[3], &prev))
            return 0;
        if (prev < 0)
            prev = WSGW_ID_NO_PREV;
    }
    if (!set_topic(out, (const char *)msg + sp[0].offset, sp[0].length, ':',
                   (const char *)msg + sp[1].offset, sp[1].length))
        return 0;
    return found(out, WSGW_ID_SEQUENCE, seq, prev);
}

/* gateway/dialects/coinbase.py TYPE_CHANNEL */
static const char *const coinbase_channels[][2] = {
    {"match", "matches"}, {"last_match", "matches"}, {"ticker", "ticker"},
    {"ticker_batch", "ticker_batch"}, {"snapshot", "level2"}, {"l2update", "level2"},
    {"received", "full"}, {"open", "full"}, {"done", "full"}, {"change", "full"},
    {"activate", "full"}, {"auction", "auction"},
};

static int coinbase(const uint8_t *msg, uint32_t len, struct wsgw_identity *out)
{
    struct wsgw_topic_span sp[WSGW_TOPIC_MAX_PATHS];
    int64_t seq;
    if (!scan(SPEC_COINBASE, msg, len, sp) || !is_string(&sp[1]) || sp[1].length == 0 ||
        !int_of(msg, &sp[2], &seq) || seq == -INT64_MAX)
        return 0;
    const char *channel = NULL;
    for (size_t i = 0; i < sizeof(coinbase_channels) / sizeof(coinbase_channels[0]); i++) {
        if (string_is(msg, &sp[0], coinbase_channels[i][0])) {
            channel = coinbase_channels[i][1];
            break;
        }
    }
    if (!channel || !set_topic(out, channel, strlen(channel), ':',
                               (const char *)msg + sp[1].offset, sp[1].length))
        return 0;
    if (strcmp(channel, "full") == 0)
        return found(out, WSGW_ID_SEQUENCE, seq, seq - 1);
    return found(out, WSGW_ID_ID, seq, WSGW_ID_NO_PREV);
}

WSGW_API int wsgw_identity_scan(uint32_t dialect, const uint8_t *msg, uint32_t len,
                                struct wsgw_identity *out)
{
    pthread_once(&specs_once, build_specs);
    switch (dialect) {
    case WSGW_ID_BINANCE:
        return binance(msg, len, out);
    case WSGW_ID_BYBIT:
        return bybit(msg, len, out);
    case WSGW_ID_OKX:
        return okx(msg, len, out);
    case WSGW_ID_COINBASE:
        return coinbase(msg, len, out);
    default:
        return 0;
    }
}
