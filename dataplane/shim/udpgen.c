/* UDP transmit at full speed on a DPDK port, for the udp-pps benchmark (gateway/bench/udp.py).
 *
 * The caller builds one complete frame (Ethernet + IPv4 + UDP + payload, checksums done)
 * whose payload starts with an 8-byte big-endian sequence number. wsgw_udp_flood sends
 * `count` copies: mbufs are allocated in bulk, the template copied in, the sequence number
 * (first_seq, first_seq + 1, ...) written and the UDP checksum updated (or set to 0), then
 * rte_eth_tx_burst in bursts. Frames the PMD refuses are offered again in the next call and
 * counted, so the receiver sees every sequence number once. wsgw_udp_frame builds one frame
 * exactly as the flood does (any build, no DPDK needed: tests check the checksum with it).
 * Built without DPDK, wsgw_udp_flood reports "built without DPDK" (-ENOTSUP).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "shim_internal.h"
#include "wsgw_udpgen.h"

/* A benchmark tool: in the library only when built for benchmarks (see wsgw_udpgen.h). */
#ifdef WSGW_BENCH

#define UDPGEN_BURST_MAX 512
#define ETH_HLEN 14
#define SEQ_LEN 8

/* Where the fields are in the template, and the checksum of everything but the sequence. */
struct udp_layout {
    uint16_t csum_off; /* UDP checksum field */
    uint16_t seq_off;  /* first payload byte: the sequence number */
    uint32_t base_sum; /* pseudo header + UDP header (checksum 0) + payload, seq as zero */
};

static uint32_t sum_be16(const uint8_t *p, size_t len, uint32_t sum)
{
    size_t i = 0;
    for (; i + 1 < len; i += 2)
        sum += (uint32_t)p[i] << 8 | p[i + 1];
    if (i < len)
        sum += (uint32_t)p[i] << 8;
    return sum;
}

static uint16_t fold(uint32_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xFFFF) + (sum >> 16);
    return (uint16_t)sum;
}

static int udp_layout(const uint8_t *t, uint16_t len, struct udp_layout *l)
{
    if (len < ETH_HLEN + 20 + 8 + SEQ_LEN) {
        wsgw_set_error("UDP template of %u bytes is too short for Ethernet+IPv4+UDP+"
                       "an 8-byte sequence number", len);
        return -EINVAL;
    }
    if (t[12] != 0x08 || t[13] != 0x00) {
        wsgw_set_error("UDP template is not an untagged IPv4 frame (ethertype %02x%02x)",
                       t[12], t[13]);
        return -EINVAL;
    }
    const uint8_t *ip = t + ETH_HLEN;
    unsigned ihl = (unsigned)(ip[0] & 15) * 4;
    if (ip[0] >> 4 != 4 || ihl < 20 || ip[9] != 17) {
        wsgw_set_error("UDP template: not an IPv4 header with protocol 17");
        return -EINVAL;
    }
    unsigned udp_off = ETH_HLEN + ihl;
    if (udp_off + 8 + SEQ_LEN > len) {
        wsgw_set_error("UDP template: no room for the sequence number after the headers");
        return -EINVAL;
    }
    const uint8_t *udp = t + udp_off;
    unsigned udp_len = (unsigned)udp[4] << 8 | udp[5];
    if (udp_len < 8 + SEQ_LEN || udp_off + udp_len > len) {
        wsgw_set_error("UDP template: UDP length %u does not fit the %u-byte frame", udp_len,
                       len);
        return -EINVAL;
    }
    uint32_t sum = sum_be16(ip + 12, 8, 0); /* source and destination addresses */
    sum += 17 + udp_len;
    sum = sum_be16(udp, 6, sum); /* ports and length; the checksum field counts as 0 */
    sum = sum_be16(udp + 8 + SEQ_LEN, udp_len - 8 - SEQ_LEN, sum);
    l->csum_off = (uint16_t)(udp_off + 6);
    l->seq_off = (uint16_t)(udp_off + 8);
    l->base_sum = sum;
    return 0;
}

/* Write seq and the checksum into a frame that holds a copy of the template. */
static inline void stamp(uint8_t *f, const struct udp_layout *l, uint64_t seq, int csum)
{
    uint8_t *s = f + l->seq_off;
    for (int i = 0; i < 8; i++)
        s[i] = (uint8_t)(seq >> (56 - 8 * i));
    uint16_t c = 0;
    if (csum) {
        uint32_t sum = l->base_sum + (uint32_t)(seq >> 48) + (uint32_t)((seq >> 32) & 0xFFFF) +
                       (uint32_t)((seq >> 16) & 0xFFFF) + (uint32_t)(seq & 0xFFFF);
        c = (uint16_t)~fold(sum);
        if (c == 0)
            c = 0xFFFF; /* 0 means "no checksum" in UDP over IPv4 */
    }
    f[l->csum_off] = (uint8_t)(c >> 8);
    f[l->csum_off + 1] = (uint8_t)c;
}

WSGW_API int wsgw_udp_frame(const uint8_t *tmpl, uint16_t len, uint64_t seq, int csum,
                            uint8_t *out)
{
    struct udp_layout l;
    int rc = udp_layout(tmpl, len, &l);
    if (rc)
        return rc;
    memcpy(out, tmpl, len);
    stamp(out, &l, seq, csum);
    return len;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#ifndef WSGW_HAVE_DPDK

WSGW_API int wsgw_udp_flood(wsgw_port *p, const uint8_t *tmpl, uint16_t len, uint64_t count,
                            uint16_t burst, uint64_t first_seq, int csum, uint64_t timeout_ns,
                            struct wsgw_udp_flood_result *out)
{
    (void)p; (void)tmpl; (void)len; (void)count; (void)burst; (void)first_seq; (void)csum;
    (void)timeout_ns;
    memset(out, 0, sizeof(*out));
    (void)now_ns;
    wsgw_set_error("wsgw shim was built without DPDK (pkg-config libdpdk not found at build "
                   "time)");
    return -ENOTSUP;
}

#else /* WSGW_HAVE_DPDK */

#include <rte_ethdev.h>
#include <rte_mbuf.h>

WSGW_API int wsgw_udp_flood(wsgw_port *p, const uint8_t *tmpl, uint16_t len, uint64_t count,
                            uint16_t burst, uint64_t first_seq, int csum, uint64_t timeout_ns,
                            struct wsgw_udp_flood_result *out)
{
    memset(out, 0, sizeof(*out));
    struct udp_layout l;
    int rc = udp_layout(tmpl, len, &l);
    if (rc)
        return rc;
    if (burst == 0 || burst > UDPGEN_BURST_MAX) {
        wsgw_set_error("burst %u out of range 1..%d", burst, UDPGEN_BURST_MAX);
        return -EINVAL;
    }
    if (len > p->data_room) {
        wsgw_set_error("a %u-byte frame does not fit an mbuf of %s (%u bytes)", len,
                       p->devname, p->data_room);
        return -EMSGSIZE;
    }
    if (!p->started) {
        wsgw_set_error("port %s is not started", p->devname);
        return -ENETDOWN;
    }
    struct rte_mbuf *pkts[UDPGEN_BURST_MAX];
    uint64_t queued = 0; /* frames built so far (sent + pending) */
    uint16_t head = 0, pending = 0;
    uint64_t start = now_ns();
    uint64_t deadline = timeout_ns ? start + timeout_ns : UINT64_MAX;
    while (out->sent < count) {
        if (pending == 0) {
            uint16_t n = count - queued < burst ? (uint16_t)(count - queued) : burst;
            if (unlikely(rte_pktmbuf_alloc_bulk(p->pool, pkts, n) != 0)) {
                out->nombuf++;
                if (now_ns() > deadline)
                    break;
                continue;
            }
            for (uint16_t i = 0; i < n; i++) {
                struct rte_mbuf *m = pkts[i];
                uint8_t *f = rte_pktmbuf_mtod(m, uint8_t *);
                memcpy(f, tmpl, len);
                stamp(f, &l, first_seq + queued + i, csum);
                m->data_len = len;
                m->pkt_len = len;
            }
            queued += n;
            head = 0;
            pending = n;
        }
        uint16_t tx = rte_eth_tx_burst(p->port_id, 0, pkts + head, pending);
        out->bursts++;
        out->sent += tx;
        head = (uint16_t)(head + tx);
        pending = (uint16_t)(pending - tx);
        if (unlikely(pending)) {
            out->refused += pending;
            if (now_ns() > deadline) {
                rte_pktmbuf_free_bulk(pkts + head, pending);
                break;
            }
        }
    }
    out->ns = now_ns() - start;
    return 0;
}

#endif /* WSGW_HAVE_DPDK */

#endif /* WSGW_BENCH */
