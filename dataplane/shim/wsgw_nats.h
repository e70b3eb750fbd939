/* Core NATS message scanning: the per-message loop of the consumer SDK's NATS reader
 * (gateway/client/nats_core.py, https://docs.nats.io/reference/reference-protocols/nats-protocol).
 * Only the plain case is taken here, a MSG or HMSG line without a reply subject and its whole
 * payload; the scan stops at anything else (a control line, a message not all in the buffer,
 * a reply subject, anything malformed) and the Python parser reads that, with the same result
 * and the same errors (tested for equality).
 */
#ifndef WSGW_NATS_H
#define WSGW_NATS_H

#include "wsgw_shim.h"

/* Words per message in wsgw_nats_scan's out[] array. */
#define WSGW_NATS_SCAN_WORDS 9
/* A header number the scan leaves to the caller (a value that is not plain digits). */
#define WSGW_NATS_ASK UINT64_MAX

/* Scan buf[start..len) for complete messages, at most max_msgs, each in
 * WSGW_NATS_SCAN_WORDS words of out:
 *   out[0], out[1] = offset and length of the subject
 *   out[2]         = the subscription id
 *   out[3], out[4] = offset and length of the header block (HMSG; length 0: a MSG)
 *   out[5], out[6] = offset and length of the payload
 *   out[7], out[8] = the values of the headers named number_a and number_b (NUL-terminated,
 *                    case as sent; NULL: none) as numbers, the first line of each name:
 *                    0 when the message has no such header, WSGW_NATS_ASK when its value
 *                    is not 1..19 digits between blanks (the caller reads it)
 * *consumed is set to the offset just past the last message described (start when none).
 * A number is taken only with at most 19 digits; a payload or header size only up to
 * max_payload (the Python parser refuses a larger one).
 * Returns the number of messages described (>= 0), or -EINVAL. */
WSGW_API int wsgw_nats_scan(const uint8_t *buf, size_t start, size_t len, uint64_t max_payload,
                            const char *number_a, const char *number_b, uint64_t *out,
                            uint32_t max_msgs, uint64_t *consumed);

#endif
