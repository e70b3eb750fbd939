/* udpsink: counts and checks the datagrams of the udp-pps benchmark (recvmmsg).
 *
 *   udpsink HOST PORT
 *
 * Binds HOST:PORT with a large receive buffer and reads datagrams in batches of 64. Each
 * datagram of a run carries an 8-byte big-endian sequence number and a 4-byte big-endian
 * tag (see udpsend.c and udpgen.c). Commands on stdin, one per line:
 *
 *   reset COUNT TAG   start a run: expect sequence numbers 0..COUNT-1 with this tag
 *   report            one JSON line: received, unique, duplicates, out_of_range,
 *                     foreign (another tag), short (< 12 bytes), idle_ns (since the last
 *                     datagram of any kind)
 *   quit              exit
 *
 * Prints "ready port=<port>" once bound.
 *
 * Build: gcc -O2 -Wall -Wextra -Werror -std=gnu11 -o udpsink udpsink.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define SLOT 2048

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static struct {
    uint64_t expect, received, unique, duplicates, out_of_range, foreign, short_;
    uint32_t tag;
    uint8_t *seen; /* one bit per expected sequence number */
    uint64_t last_rx;
} run;

static void reset(uint64_t count, uint32_t tag)
{
    free(run.seen);
    memset(&run, 0, sizeof(run));
    run.expect = count;
    run.tag = tag;
    run.seen = calloc(count / 8 + 1, 1);
    if (!run.seen) {
        fprintf(stderr, "udpsink: out of memory for %llu sequence numbers\n",
                (unsigned long long)count);
        exit(1);
    }
    run.last_rx = monotonic_ns();
}

static void count_datagram(const uint8_t *p, size_t len)
{
    run.received++;
    if (len < 12) {
        run.short_++;
        return;
    }
    if (get_be32(p + 8) != run.tag) {
        run.foreign++;
        return;
    }
    uint64_t seq = get_be64(p);
    if (seq >= run.expect) {
        run.out_of_range++;
        return;
    }
    uint8_t bit = (uint8_t)(1u << (seq & 7));
    if (run.seen[seq >> 3] & bit) {
        run.duplicates++;
    } else {
        run.seen[seq >> 3] |= bit;
        run.unique++;
    }
}

static int command(char *line)
{
    unsigned long long count;
    unsigned long tag;
    if (sscanf(line, "reset %llu %lu", &count, &tag) == 2) {
        reset(count, (uint32_t)tag);
        printf("ok\n");
    } else if (strncmp(line, "report", 6) == 0) {
        printf("{\"received\": %llu, \"unique\": %llu, \"duplicates\": %llu, "
               "\"out_of_range\": %llu, \"foreign\": %llu, \"short\": %llu, "
               "\"expected\": %llu, \"idle_ns\": %llu}\n",
               (unsigned long long)run.received, (unsigned long long)run.unique,
               (unsigned long long)run.duplicates, (unsigned long long)run.out_of_range,
               (unsigned long long)run.foreign, (unsigned long long)run.short_,
               (unsigned long long)run.expect,
               (unsigned long long)(monotonic_ns() - run.last_rx));
    } else if (strncmp(line, "quit", 4) == 0) {
        return -1;
    } else {
        printf("error unknown command\n");
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: udpsink HOST PORT\n");
        return 2;
    }
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)atoi(argv[2]));
    if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
        fprintf(stderr, "udpsink: bad IPv4 address %s\n", argv[1]);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rcvbuf = 64 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        perror("udpsink: bind");
        return 1;
    }
    socklen_t alen = sizeof(addr);
    getsockname(fd, (struct sockaddr *)&addr, &alen);
    reset(0, 0);
    printf("ready port=%u\n", ntohs(addr.sin_port));
    fflush(stdout);

    static uint8_t bufs[BATCH][SLOT];
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    for (int i = 0; i < BATCH; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = SLOT;
        memset(&msgs[i], 0, sizeof(msgs[i]));
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    char line[256];
    size_t line_len = 0;
    for (;;) {
        struct pollfd pfd[2] = {{fd, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
        if (poll(pfd, 2, 1000) < 0 && errno != EINTR) {
            perror("udpsink: poll");
            return 1;
        }
        if (pfd[0].revents & POLLIN) {
            for (int rounds = 0; rounds < 64; rounds++) {
                int n = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
                if (n <= 0)
                    break;
                for (int i = 0; i < n; i++)
                    count_datagram(bufs[i], msgs[i].msg_len);
                run.last_rx = monotonic_ns();
            }
        }
        if (pfd[1].revents & (POLLIN | POLLHUP)) {
            ssize_t r = read(STDIN_FILENO, line + line_len, sizeof(line) - 1 - line_len);
            if (r <= 0)
                return 0; /* the controller went away */
            line_len += (size_t)r;
            line[line_len] = '\0';
            char *nl;
            while ((nl = strchr(line, '\n')) != NULL) {
                *nl = '\0';
                if (command(line) < 0)
                    return 0;
                size_t rest = line_len - (size_t)(nl + 1 - line);
                memmove(line, nl + 1, rest + 1);
                line_len = rest;
            }
            if (line_len == sizeof(line) - 1)
                line_len = 0; /* an over-long line: drop it */
        }
    }
}
