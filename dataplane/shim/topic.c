/* Topic extraction from JSON text messages (see wsgw_topic.h for the contract).
 *
 * One forward pass. The walk descends only into the members that lie on a configured path;
 * every other value is skipped by bracket matching that knows strings (SSE2 finds the next
 * quote, backslash or bracket 16 bytes at a time). The walk stops as soon as every path is
 * found, so a message whose topic key comes first costs a few dozen bytes of scanning.
 * Keys on the walk are compared after decoding their escapes, as json.loads would see them.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "shim_internal.h"
#include "wsgw_topic.h"

enum { ERR_NONE = 0, ERR_MALFORMED = 1, ERR_DEEP = 2 };

struct scan {
    const uint8_t *base;
    const uint8_t *end;
    const struct wsgw_topic_spec *spec;
    struct wsgw_topic_span *out;
    uint32_t pending; /* paths not found yet, one bit each */
    int early;        /* stop as soon as pending is empty */
    int done;
    int err;
};

/* Bytes that end a bare token (number or literal). */
static const uint8_t token_end[256] = {
    [' '] = 1, ['\t'] = 1, ['\n'] = 1, ['\r'] = 1, [','] = 1, [':'] = 1,
    ['['] = 1, [']'] = 1,  ['{'] = 1,  ['}'] = 1,  ['"'] = 1,
};

static inline int is_ws(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end)
{
    while (p < end && is_ws(*p))
        p++;
    return p;
}

static inline const uint8_t *fail(struct scan *s, int err)
{
    s->err = err;
    return NULL;
}

/* p just after an opening quote: returns just after the closing quote, or NULL. */
static const uint8_t *skip_string(const uint8_t *p, const uint8_t *end, int *esc)
{
    for (;;) {
#if defined(__SSE2__)
        const __m128i quote = _mm_set1_epi8('"');
        const __m128i bslash = _mm_set1_epi8('\\');
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
            int m = _mm_movemask_epi8(
                _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)));
            if (m) {
                p += __builtin_ctz((unsigned)m);
                goto found;
            }
            p += 16;
        }
#endif
        while (p < end && *p != '"' && *p != '\\')
            p++;
        if (p >= end)
            return NULL;
#if defined(__SSE2__)
    found:
#endif
        if (*p == '"')
            return p + 1;
        /* A backslash: the next byte is escaped, whatever it is. */
        *esc = 1;
        if (end - p < 2)
            return NULL;
        p += 2;
    }
}

#if defined(__SSE2__)
/* One bit per byte of p[0..63] that is a quote, a backslash or a bracket. */
static inline uint64_t structural64(const uint8_t *p)
{
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i bslash = _mm_set1_epi8('\\');
    const __m128i lower = _mm_set1_epi8(0x20);
    const __m128i open = _mm_set1_epi8('{');
    const __m128i close = _mm_set1_epi8('}');
    uint64_t m = 0;
    for (int k = 0; k < 4; k++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * k));
        __m128i l = _mm_or_si128(v, lower); /* '[' -> '{', ']' -> '}' */
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                   _mm_or_si128(_mm_cmpeq_epi8(l, open), _mm_cmpeq_epi8(l, close)));
        m |= (uint64_t)(uint16_t)_mm_movemask_epi8(hit) << (16 * k);
    }
    return m;
}
#endif

/* The bracket skipper's state: how deep, which levels are objects, inside a string. */
struct skipper {
    unsigned depth;
    int in_string;
    uint64_t objects[WSGW_TOPIC_MAX_NESTING / 64];
};

/* Feed one structural byte. Returns 1 when the outermost bracket closed, 0 to go on, or
 * -ERR_MALFORMED / -ERR_DEEP. */
static inline int skipper_feed(struct skipper *k, uint8_t c)
{
    if (k->in_string) {
        if (c == '"')
            k->in_string = 0;
        return 0; /* backslashes are handled by the caller: they hide the next byte */
    }
    switch (c) {
    case '"':
        k->in_string = 1;
        return 0;
    case '{':
    case '[':
        if (k->depth >= WSGW_TOPIC_MAX_NESTING)
            return -ERR_DEEP;
        if (c == '{')
            k->objects[k->depth / 64] |= 1ull << (k->depth % 64);
        else
            k->objects[k->depth / 64] &= ~(1ull << (k->depth % 64));
        k->depth++;
        return 0;
    case '}':
    case ']':
        k->depth--;
        if ((int)((k->objects[k->depth / 64] >> (k->depth % 64)) & 1) != (c == '}'))
            return -ERR_MALFORMED;
        return k->depth == 0;
    default:
        return 0; /* a backslash outside a string: not JSON, but nothing to track */
    }
}

/* p just after an opening bracket of the given type: returns just after the matching
 * closing bracket. Nothing but strings (with their escapes) and brackets is looked at;
 * 64 bytes at a time, visiting only the structural bytes of each block. */
static const uint8_t *skip_open(struct scan *s, const uint8_t *p, int is_object)
{
    const uint8_t *end = s->end;
    struct skipper k;
    int hide_first = 0; /* the byte at p is escaped (a backslash ended the last block) */
    int rc;

    k.depth = 1;
    k.in_string = 0;
    k.objects[0] = (uint64_t)(is_object != 0);
#if defined(__SSE2__)
    while (end - p >= 64) {
        uint64_t m = structural64(p);
        if (hide_first) {
            m &= ~1ull;
            hide_first = 0;
        }
        while (m) {
            unsigned i = (unsigned)__builtin_ctzll(m);
            uint8_t c = p[i];
            m &= m - 1;
            if (c == '\\') {
                if (k.in_string) {
                    if (i == 63)
                        hide_first = 1;
                    else
                        m &= ~(1ull << (i + 1));
                }
                continue;
            }
            rc = skipper_feed(&k, c);
            if (rc) {
                if (rc < 0)
                    return fail(s, -rc);
                return p + i + 1;
            }
        }
        p += 64;
    }
#endif
    if (hide_first)
        p++;
    while (p < end) {
        uint8_t c = *p++;
        if (c == '\\') {
            if (k.in_string) {
                if (p >= end)
                    break;
                p++;
            }
            continue;
        }
        if (c != '"' && c != '{' && c != '}' && c != '[' && c != ']')
            continue;
        rc = skipper_feed(&k, c);
        if (rc) {
            if (rc < 0)
                return fail(s, -rc);
            return p;
        }
    }
    return fail(s, ERR_MALFORMED);
}

static inline uint32_t kind_of(uint8_t c)
{
    switch (c) {
    case '"':
        return WSGW_JSON_STRING;
    case '{':
        return WSGW_JSON_OBJECT;
    case '[':
        return WSGW_JSON_ARRAY;
    case 't':
        return WSGW_JSON_TRUE;
    case 'f':
        return WSGW_JSON_FALSE;
    case 'n':
        return WSGW_JSON_NULL;
    default:
        return (c == '-' || (c >= '0' && c <= '9')) ? WSGW_JSON_NUMBER : WSGW_JSON_ABSENT;
    }
}

/* p at a value of the given kind: returns just after it. *esc is set for escaped strings. */
static const uint8_t *skip_value(struct scan *s, const uint8_t *p, uint32_t kind, int *esc)
{
    const uint8_t *end = s->end;
    const uint8_t *q;
    const char *word;
    size_t n;

    switch (kind) {
    case WSGW_JSON_STRING:
        q = skip_string(p + 1, end, esc);
        return q ? q : fail(s, ERR_MALFORMED);
    case WSGW_JSON_OBJECT:
    case WSGW_JSON_ARRAY:
        return skip_open(s, p + 1, kind == WSGW_JSON_OBJECT);
    default:
        break;
    }
    q = p;
    while (q < end && !token_end[*q])
        q++;
    n = (size_t)(q - p);
    if (kind == WSGW_JSON_NUMBER)
        return q;
    word = kind == WSGW_JSON_TRUE ? "true" : kind == WSGW_JSON_FALSE ? "false" : "null";
    if (n != strlen(word) || memcmp(p, word, n) != 0)
        return fail(s, ERR_MALFORMED);
    return q;
}

static int read_u4(const uint8_t *p, const uint8_t *end, unsigned *out)
{
    unsigned v = 0;
    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return -1;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return 0;
}

/* Decode a key with escapes into buf as UTF-8. Returns the decoded length, -1 when the key
 * cannot equal any configured key (too long, or a lone surrogate), -2 when malformed. */
static int decode_key(const uint8_t *p, const uint8_t *end, uint8_t *buf, size_t cap)
{
    size_t n = 0;
    int unmatchable = 0;

    while (p < end) {
        unsigned cp;
        uint8_t c = *p++;
        if (c != '\\') {
            if (n < cap)
                buf[n] = c;
            n++;
            continue;
        }
        if (p >= end)
            return -2;
        c = *p++;
        switch (c) {
        case '"':
        case '\\':
        case '/':
            cp = c;
            break;
        case 'b':
            cp = '\b';
            break;
        case 'f':
            cp = '\f';
            break;
        case 'n':
            cp = '\n';
            break;
        case 'r':
            cp = '\r';
            break;
        case 't':
            cp = '\t';
            break;
        case 'u':
            if (read_u4(p, end, &cp) < 0)
                return -2;
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (end - p >= 6 && p[0] == '\\' && p[1] == 'u' && read_u4(p + 2, end, &lo) == 0 &&
                    lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                } else {
                    unmatchable = 1;
                    continue;
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                unmatchable = 1;
                continue;
            }
            break;
        default:
            return -2;
        }
        uint8_t u[4];
        size_t k;
        if (cp < 0x80) {
            u[0] = (uint8_t)cp;
            k = 1;
        } else if (cp < 0x800) {
            u[0] = (uint8_t)(0xC0 | (cp >> 6));
            u[1] = (uint8_t)(0x80 | (cp & 0x3F));
            k = 2;
        } else if (cp < 0x10000) {
            u[0] = (uint8_t)(0xE0 | (cp >> 12));
            u[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            u[2] = (uint8_t)(0x80 | (cp & 0x3F));
            k = 3;
        } else {
            u[0] = (uint8_t)(0xF0 | (cp >> 18));
            u[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
            u[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            u[3] = (uint8_t)(0x80 | (cp & 0x3F));
            k = 4;
        }
        for (size_t i = 0; i < k; i++, n++)
            if (n < cap)
                buf[n] = u[i];
    }
    if (unmatchable || n > cap)
        return -1;
    return (int)n;
}

/* The paths of mask whose component at depth is this key. */
static uint32_t match_key(struct scan *s, unsigned depth, uint32_t mask, const uint8_t *key,
                          size_t len, int esc)
{
    uint8_t buf[WSGW_TOPIC_MAX_KEY];
    uint32_t sub = 0;

    if (esc) {
        int n = decode_key(key, key + len, buf, sizeof(buf));
        if (n == -2) {
            s->err = ERR_MALFORMED;
            return 0;
        }
        if (n < 0)
            return 0;
        key = buf;
        len = (size_t)n;
    }
    for (uint32_t i = 0; mask >> i; i++) {
        if (!((mask >> i) & 1))
            continue;
        const struct wsgw_topic_key *k = &s->spec->paths[i].keys[depth];
        if (!k->is_index && k->len == len && memcmp(k->name, key, len) == 0)
            sub |= 1u << i;
    }
    return sub;
}

static const uint8_t *walk(struct scan *s, const uint8_t *p, unsigned depth, uint32_t mask,
                           uint32_t kind);

/* p at the value of a member (key or index) matched by the paths in sub, at depth. */
static const uint8_t *member(struct scan *s, const uint8_t *p, unsigned depth, uint32_t sub)
{
    const struct wsgw_topic_spec *spec = s->spec;
    uint32_t targets = 0, descend = 0, presence = 0;
    uint32_t kind = kind_of(*p);
    const uint8_t *start = p, *end;
    int esc = 0;

    if (kind == WSGW_JSON_ABSENT)
        return fail(s, ERR_MALFORMED);
    sub &= s->pending;
    for (uint32_t i = 0; sub >> i; i++) {
        if (!((sub >> i) & 1))
            continue;
        const struct wsgw_topic_path *path = &spec->paths[i];
        if (depth + 1 == path->depth) {
            targets |= 1u << i;
            if (path->flags & WSGW_TOPIC_PRESENCE)
                presence |= 1u << i;
        } else if ((kind == WSGW_JSON_OBJECT && !path->keys[depth + 1].is_index) ||
                   (kind == WSGW_JSON_ARRAY && path->keys[depth + 1].is_index)) {
            descend |= 1u << i;
        }
    }
    if (!targets && !descend)
        return skip_value(s, p, kind, &esc);
    if (descend) {
        end = walk(s, p, depth + 1, descend, kind);
        if (!end || s->done)
            return end;
    } else if (s->early && presence == targets && (s->pending & ~targets) == 0) {
        /* Only presence is asked for and nothing else is missing: no need to skip it. */
        end = p;
    } else {
        end = skip_value(s, p, kind, &esc);
        if (!end)
            return NULL;
        /* A bare token that runs into the end of the input may be cut short ("12" of
         * "123"), and a member value always has a closing bracket after it. */
        if (end == s->end && kind >= WSGW_JSON_NUMBER && kind <= WSGW_JSON_NULL)
            return fail(s, ERR_MALFORMED);
    }
    for (uint32_t i = 0; targets >> i; i++) {
        if (!((targets >> i) & 1))
            continue;
        struct wsgw_topic_span *span = &s->out[i];
        if ((presence >> i) & 1) {
            span->offset = (uint32_t)(start - s->base);
            span->length = 0;
            span->kind = kind;
        } else if (kind == WSGW_JSON_STRING) {
            span->offset = (uint32_t)(start + 1 - s->base);
            span->length = (uint32_t)(end - start - 2);
            span->kind = esc ? WSGW_JSON_STRING_ESC : WSGW_JSON_STRING;
        } else {
            span->offset = (uint32_t)(start - s->base);
            span->length = (uint32_t)(end - start);
            span->kind = kind;
        }
    }
    s->pending &= ~targets;
    if (s->early && !s->pending)
        s->done = 1;
    return end;
}

/* p at '{' or '[' whose members some paths in mask continue into. */
static const uint8_t *walk(struct scan *s, const uint8_t *p, unsigned depth, uint32_t mask,
                           uint32_t kind)
{
    const uint8_t *end = s->end;
    const int is_object = kind == WSGW_JSON_OBJECT;
    const uint8_t closer = is_object ? '}' : ']';
    uint32_t index = 0;

    p = skip_ws(p + 1, end);
    if (p < end && *p == closer)
        return p + 1;
    for (;;) {
        uint32_t sub = 0;
        if (is_object) {
            int esc = 0;
            if (p >= end || *p != '"')
                return fail(s, ERR_MALFORMED);
            const uint8_t *key = p + 1;
            p = skip_string(key, end, &esc);
            if (!p)
                return fail(s, ERR_MALFORMED);
            sub = match_key(s, depth, mask, key, (size_t)(p - 1 - key), esc);
            if (s->err)
                return NULL;
            p = skip_ws(p, end);
            if (p >= end || *p != ':')
                return fail(s, ERR_MALFORMED);
            p = skip_ws(p + 1, end);
        } else {
            for (uint32_t i = 0; mask >> i; i++) {
                const struct wsgw_topic_key *k = &s->spec->paths[i].keys[depth];
                if (((mask >> i) & 1) && k->is_index && k->index == index)
                    sub |= 1u << i;
            }
            index++;
        }
        if (p >= end)
            return fail(s, ERR_MALFORMED);
        p = member(s, p, depth, sub);
        if (!p || s->done)
            return p;
        if (!(mask & s->pending))
            /* Nothing left to find in here: skip the rest of this container. */
            return skip_open(s, p, is_object);
        p = skip_ws(p, end);
        if (p >= end)
            return fail(s, ERR_MALFORMED);
        if (*p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (*p == closer)
            return p + 1;
        return fail(s, ERR_MALFORMED);
    }
}

static int extract_one(const struct wsgw_topic_spec *spec, const uint8_t *msg, uint32_t len,
                       struct wsgw_topic_span *out)
{
    struct scan s = {
        .base = msg,
        .end = msg + len,
        .spec = spec,
        .out = out,
        .pending = (1u << spec->n_paths) - 1,
        .early = !(spec->flags & WSGW_TOPIC_STRICT),
    };
    const uint8_t *p;
    uint32_t all = s.pending;

    memset(out, 0, sizeof(*out) * spec->n_paths);
    p = skip_ws(msg, s.end);
    if (p < s.end) {
        uint32_t kind = kind_of(*p);
        if (kind == WSGW_JSON_OBJECT || kind == WSGW_JSON_ARRAY) {
            uint32_t mask = 0;
            for (uint32_t i = 0; i < spec->n_paths; i++)
                if (spec->paths[i].keys[0].is_index == (kind == WSGW_JSON_ARRAY))
                    mask |= 1u << i;
            p = mask ? walk(&s, p, 0, mask, kind) : skip_value(&s, p, kind, &(int){0});
        } else if (kind != WSGW_JSON_ABSENT) {
            p = skip_value(&s, p, kind, &(int){0});
        } else {
            s.err = ERR_MALFORMED;
            p = NULL;
        }
    } else {
        s.err = ERR_MALFORMED;
        p = NULL;
    }
    if (p && !s.done && skip_ws(p, s.end) != s.end)
        s.err = ERR_MALFORMED; /* something after the value */
    if (s.err) {
        memset(out, 0, sizeof(*out) * spec->n_paths);
        return s.err == ERR_DEEP ? WSGW_TOPIC_TOO_DEEP : WSGW_TOPIC_MALFORMED;
    }
    return (s.pending & all) ? WSGW_TOPIC_PARTIAL : WSGW_TOPIC_OK;
}

WSGW_API uint32_t wsgw_topic_spec_size(void) { return (uint32_t)sizeof(struct wsgw_topic_spec); }

WSGW_API int wsgw_topic_spec_check(const struct wsgw_topic_spec *spec)
{
    if (!spec) {
        wsgw_set_error("topic spec: NULL");
        return -EINVAL;
    }
    if (spec->n_paths < 1 || spec->n_paths > WSGW_TOPIC_MAX_PATHS) {
        wsgw_set_error("topic spec: %u paths, expected 1..%d", spec->n_paths,
                       WSGW_TOPIC_MAX_PATHS);
        return -EINVAL;
    }
    if (spec->flags & ~WSGW_TOPIC_STRICT) {
        wsgw_set_error("topic spec: unknown flags 0x%x", spec->flags);
        return -EINVAL;
    }
    for (uint32_t i = 0; i < spec->n_paths; i++) {
        const struct wsgw_topic_path *path = &spec->paths[i];
        if (path->depth < 1 || path->depth > WSGW_TOPIC_MAX_DEPTH) {
            wsgw_set_error("topic spec: path %u has depth %u, expected 1..%d", i, path->depth,
                           WSGW_TOPIC_MAX_DEPTH);
            return -EINVAL;
        }
        if (path->flags & ~WSGW_TOPIC_PRESENCE) {
            wsgw_set_error("topic spec: path %u has unknown flags 0x%x", i, path->flags);
            return -EINVAL;
        }
        for (unsigned d = 0; d < path->depth; d++) {
            const struct wsgw_topic_key *k = &path->keys[d];
            if (k->is_index > 1 || (!k->is_index && k->len > WSGW_TOPIC_MAX_KEY)) {
                wsgw_set_error("topic spec: path %u component %u is invalid", i, d);
                return -EINVAL;
            }
        }
    }
    return 0;
}

WSGW_API int wsgw_topic_extract(const struct wsgw_topic_spec *spec, const uint8_t *msg,
                                uint32_t len, struct wsgw_topic_span *out)
{
    int rc = wsgw_topic_spec_check(spec);
    if (rc < 0)
        return rc;
    return extract_one(spec, msg, len, out);
}

WSGW_API int wsgw_topic_extract_batch(const struct wsgw_topic_spec *spec, const uint8_t *buf,
                                      const uint32_t *offsets, const uint32_t *lengths,
                                      uint32_t n, struct wsgw_topic_span *out, int8_t *status)
{
    int rc = wsgw_topic_spec_check(spec);
    int complete = 0;
    if (rc < 0)
        return rc;
    for (uint32_t i = 0; i < n; i++) {
        int st = extract_one(spec, buf + offsets[i], lengths[i], out + (size_t)i * spec->n_paths);
        complete += st == WSGW_TOPIC_OK;
        if (status)
            status[i] = (int8_t)st;
    }
    return complete;
}
