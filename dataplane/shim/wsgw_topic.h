/* Topic extraction: the values of a few configured key paths in a JSON text message, found
 * by one forward scan instead of a parse (the hot path runs it for every data message).
 *
 * A spec holds up to WSGW_TOPIC_MAX_PATHS paths; a path is up to WSGW_TOPIC_MAX_DEPTH
 * components, each an object key or an array index ("arg.channel", "data[0].symbol").
 * For every path the scan reports the first occurrence's byte span and JSON kind:
 *   strings  -> the bytes between the quotes (kind STRING, or STRING_ESC when they hold a
 *               backslash escape, which the caller decodes),
 *   others   -> the value's own bytes (number, true/false/null, a whole object or array).
 * A PRESENCE path reports only where its value starts and its kind, with length 0, which
 * lets the scan stop as soon as the key is seen (a cheap "is this a data message" test).
 *
 * The scan is not a validator. It reads the message up to the point where every path is
 * found (or to the end when one is missing, or always with WSGW_TOPIC_STRICT), checks the
 * structure it walks (objects, arrays, keys, escapes in the keys it compares) and skips
 * other values by bracket matching with string awareness. Anything malformed or truncated
 * before that point gives WSGW_TOPIC_MALFORMED and no spans; it never reads past len.
 * The reference implementation in Python (gateway/dialects/jsonscan.py) follows the same
 * rules byte for byte, and the tests hold the two together and against json.loads.
 */
#ifndef WSGW_TOPIC_H
#define WSGW_TOPIC_H

#include <stdint.h>

#include "wsgw_shim.h"

#define WSGW_TOPIC_MAX_PATHS 4
#define WSGW_TOPIC_MAX_DEPTH 4
#define WSGW_TOPIC_MAX_KEY 48
/* Nesting deeper than this inside a skipped value is refused (WSGW_TOPIC_TOO_DEEP). */
#define WSGW_TOPIC_MAX_NESTING 1024

/* Kinds of a found value; 0 means the path was not found. */
enum wsgw_json_kind {
    WSGW_JSON_ABSENT = 0,
    WSGW_JSON_STRING = 1,
    WSGW_JSON_STRING_ESC = 2,
    WSGW_JSON_NUMBER = 3,
    WSGW_JSON_TRUE = 4,
    WSGW_JSON_FALSE = 5,
    WSGW_JSON_NULL = 6,
    WSGW_JSON_OBJECT = 7,
    WSGW_JSON_ARRAY = 8,
};

/* Per-message status. */
enum wsgw_topic_status {
    WSGW_TOPIC_OK = 0,          /* every path found */
    WSGW_TOPIC_PARTIAL = 1,     /* the message scanned fine; some paths are absent */
    WSGW_TOPIC_MALFORMED = -1,  /* not JSON (or truncated) where it was read; no spans */
    WSGW_TOPIC_TOO_DEEP = -2,   /* nesting beyond WSGW_TOPIC_MAX_NESTING; no spans */
};

/* Path flags. */
#define WSGW_TOPIC_PRESENCE 0x1u
/* Spec flags. */
#define WSGW_TOPIC_STRICT 0x1u /* scan every message to its end, even when all is found */

struct wsgw_topic_key {
    uint16_t index;   /* the array index, when is_index */
    uint8_t is_index; /* 1: an array index, 0: an object key */
    uint8_t len;      /* key length in bytes (UTF-8) */
    char name[WSGW_TOPIC_MAX_KEY];
};

struct wsgw_topic_path {
    uint8_t depth; /* number of components, 1..WSGW_TOPIC_MAX_DEPTH */
    uint8_t flags; /* WSGW_TOPIC_PRESENCE */
    uint16_t reserved;
    struct wsgw_topic_key keys[WSGW_TOPIC_MAX_DEPTH];
};

struct wsgw_topic_spec {
    uint32_t n_paths; /* 1..WSGW_TOPIC_MAX_PATHS */
    uint32_t flags;   /* WSGW_TOPIC_STRICT */
    struct wsgw_topic_path paths[WSGW_TOPIC_MAX_PATHS];
};

struct wsgw_topic_span {
    uint32_t offset; /* from the start of the message */
    uint32_t length;
    uint32_t kind; /* enum wsgw_json_kind */
};

/* sizeof(struct wsgw_topic_spec): the binding checks its own layout against it. */
WSGW_API uint32_t wsgw_topic_spec_size(void);
/* 0, or -EINVAL with the reason in wsgw_last_error(). */
WSGW_API int wsgw_topic_spec_check(const struct wsgw_topic_spec *spec);
/* One message: out receives spec->n_paths spans. Returns a wsgw_topic_status, or -EINVAL
 * (as a value below WSGW_TOPIC_TOO_DEEP) for a bad spec. */
WSGW_API int wsgw_topic_extract(const struct wsgw_topic_spec *spec, const uint8_t *msg,
                                uint32_t len, struct wsgw_topic_span *out);
/* n messages at buf + offsets[i], lengths[i]: out receives n * spec->n_paths spans (message
 * major), status (may be NULL) one wsgw_topic_status each. Returns how many messages had
 * every path found, or -EINVAL for a bad spec. */
WSGW_API int wsgw_topic_extract_batch(const struct wsgw_topic_spec *spec, const uint8_t *buf,
                                      const uint32_t *offsets, const uint32_t *lengths,
                                      uint32_t n, struct wsgw_topic_span *out, int8_t *status);

#endif
