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
#define WSGW_NATS_SCAN_WORDS 7

/* Scan buf[start..len) for complete messages, at most max_msgs, each in
 * WSGW_NATS_SCAN_WORDS words of out:
 *   out[0], out[1] = offset and length of the subject
 *   out[2]         = the subscription id
 *   out[3], out[4] = offset and length of the header block (HMSG; length 0: a MSG)
 *   out[5], out[6] = offset and length of the payload
 * *consumed is set to the offset just past the last message described (start when none).
 * A number is taken only with at most 18 digits; a payload or header size only up to
 * max_payload (the Python parser refuses a larger one).
 * Returns the number of messages described (>= 0), or -EINVAL. */
WSGW_API int wsgw_nats_scan(const uint8_t *buf, size_t start, size_t len, uint64_t max_payload,
                            uint64_t *out, uint32_t max_msgs, uint64_t *consumed);

#endif
