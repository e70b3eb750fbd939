/* udpsend: the kernel's UDP transmit path at full speed, for the udp-pps benchmark.
 *
 *   udpsend sendto|sendmmsg DST_IP DST_PORT PAYLOAD COUNT TAG [BATCH]
 *
 * Sends COUNT datagrams of PAYLOAD bytes (>= 12) from an unconnected socket to
 * DST_IP:DST_PORT, each carrying its sequence number (8 bytes, big-endian, 0..COUNT-1)
 * and TAG (4 bytes, big-endian), then 'x'. `sendto` makes one system call per datagram
 * (the loop of the old normal_udp_send_tool); `sendmmsg` hands the kernel BATCH datagrams
 * (default 64) per call. A datagram the kernel refuses for a moment (ENOBUFS, EAGAIN) is
 * sent again and counted as a retry. One datagram with tag 0 goes first, outside the
 * timing, so the neighbour entry is resolved before the clock starts.
 * Prints one JSON line: {"mode": ..., "sent": N, "ns": elapsed, "retries": R}.
 *
 * Build: gcc -O2 -Wall -Wextra -Werror -std=gnu11 -o udpsend udpsend.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_BATCH 1024

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static void put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static int transient(int err) { return err == ENOBUFS || err == EAGAIN || err == EINTR; }

static int usage(void)
{
    fprintf(stderr, "usage: udpsend sendto|sendmmsg DST_IP DST_PORT PAYLOAD COUNT TAG [BATCH]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 7)
        return usage();
    const char *mode = argv[1];
    int use_mmsg = strcmp(mode, "sendmmsg") == 0;
    if (!use_mmsg && strcmp(mode, "sendto") != 0)
        return usage();
    struct sockaddr_in dst;
    memset(&dst, 0, sizeof(dst));
    dst.sin_family = AF_INET;
    dst.sin_port = htons((uint16_t)atoi(argv[3]));
    if (inet_pton(AF_INET, argv[2], &dst.sin_addr) != 1) {
        fprintf(stderr, "udpsend: bad IPv4 address %s\n", argv[2]);
        return 2;
    }
    size_t payload = strtoul(argv[4], NULL, 10);
    uint64_t count = strtoull(argv[5], NULL, 10);
    uint32_t tag = (uint32_t)strtoul(argv[6], NULL, 10);
    unsigned batch = argc > 7 ? (unsigned)atoi(argv[7]) : 64;
    if (payload < 12 || payload > 65507 || batch == 0 || batch > MAX_BATCH) {
        fprintf(stderr, "udpsend: PAYLOAD must be 12..65507 and BATCH 1..%d\n", MAX_BATCH);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        perror("udpsend: socket");
        return 1;
    }
    int sndbuf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));

    unsigned slots = use_mmsg ? batch : 1;
    uint8_t *bufs = malloc((size_t)slots * payload);
    struct mmsghdr *msgs = calloc(slots, sizeof(*msgs));
    struct iovec *iov = calloc(slots, sizeof(*iov));
    if (!bufs || !msgs || !iov) {
        fprintf(stderr, "udpsend: out of memory\n");
        return 1;
    }
    for (unsigned i = 0; i < slots; i++) {
        uint8_t *b = bufs + (size_t)i * payload;
        memset(b, 'x', payload);
        put_be32(b + 8, tag);
        iov[i].iov_base = b;
        iov[i].iov_len = payload;
        msgs[i].msg_hdr.msg_name = &dst;
        msgs[i].msg_hdr.msg_namelen = sizeof(dst);
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }

    /* Warm-up datagram (tag 0): ARP resolution happens here, not in the timing. */
    uint8_t warm[12];
    memset(warm, 0, sizeof(warm));
    sendto(fd, warm, sizeof(warm), 0, (struct sockaddr *)&dst, sizeof(dst));
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);

    uint64_t sent = 0, retries = 0;
    uint64_t start = monotonic_ns();
    if (!use_mmsg) {
        while (sent < count) {
            put_be64(bufs, sent);
            ssize_t n = sendto(fd, bufs, payload, 0, (struct sockaddr *)&dst, sizeof(dst));
            if (n < 0) {
                if (transient(errno)) {
                    retries++;
                    continue;
                }
                perror("udpsend: sendto");
                return 1;
            }
            sent++;
        }
    } else {
        while (sent < count) {
            unsigned k = count - sent < batch ? (unsigned)(count - sent) : batch;
            for (unsigned i = 0; i < k; i++)
                put_be64(bufs + (size_t)i * payload, sent + i);
            unsigned done = 0;
            while (done < k) {
                int n = sendmmsg(fd, msgs + done, k - done, 0);
                if (n < 0) {
                    if (transient(errno)) {
                        retries++;
                        continue;
                    }
                    perror("udpsend: sendmmsg");
                    return 1;
                }
                if ((unsigned)n < k - done)
                    retries++;
                done += (unsigned)n;
            }
            sent += k;
        }
    }
    uint64_t elapsed = monotonic_ns() - start;
    printf("{\"mode\": \"%s\", \"sent\": %llu, \"ns\": %llu, \"retries\": %llu, "
           "\"payload\": %zu, \"batch\": %u}\n",
           mode, (unsigned long long)sent, (unsigned long long)elapsed,
           (unsigned long long)retries, payload, use_mmsg ? batch : 1);
    close(fd);
    return 0;
}
