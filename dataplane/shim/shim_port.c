/* DPDK environment and ports: EAL init, port open/start/stop/close, burst RX/TX for the
 * slow path. Built without DPDK, every function reports "built without DPDK" (-ENOTSUP). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim_internal.h"

static int eal_state = WSGW_EAL_NEVER;

WSGW_API int wsgw_eal_state(void) { return eal_state; }

#ifndef WSGW_HAVE_DPDK

#define NO_DPDK()                                                                  \
    do {                                                                           \
        wsgw_set_error("wsgw shim was built without DPDK (pkg-config libdpdk not " \
                       "found at build time)");                                    \
        return -ENOTSUP;                                                           \
    } while (0)

WSGW_API int wsgw_has_dpdk(void) { return 0; }
WSGW_API const char *wsgw_dpdk_version(void) { return ""; }
WSGW_API int wsgw_eal_init(int argc, char **argv) { (void)argc; (void)argv; NO_DPDK(); }
WSGW_API int wsgw_eal_cleanup(void) { NO_DPDK(); }
WSGW_API int wsgw_thread_register(void) { NO_DPDK(); }
WSGW_API void wsgw_thread_unregister(void) {}
WSGW_API int wsgw_port_open(const char *devargs, const struct wsgw_port_conf *conf,
                            wsgw_port **out)
{
    (void)devargs; (void)conf; (void)out;
    NO_DPDK();
}
WSGW_API int wsgw_port_start(wsgw_port *p) { (void)p; NO_DPDK(); }
WSGW_API int wsgw_port_stop(wsgw_port *p) { (void)p; NO_DPDK(); }
WSGW_API void wsgw_port_close(wsgw_port *p) { (void)p; }
WSGW_API int wsgw_port_id(const wsgw_port *p) { (void)p; NO_DPDK(); }
WSGW_API int wsgw_port_mac(const wsgw_port *p, uint8_t mac[6]) { (void)p; (void)mac; NO_DPDK(); }
WSGW_API int wsgw_port_mtu(const wsgw_port *p) { (void)p; NO_DPDK(); }
WSGW_API int wsgw_port_link(const wsgw_port *p, struct wsgw_link_info *out)
{
    (void)p; (void)out;
    NO_DPDK();
}
WSGW_API int wsgw_port_stats(const wsgw_port *p, struct wsgw_port_stats *out)
{
    (void)p; (void)out;
    NO_DPDK();
}
WSGW_API int wsgw_port_rx_burst(wsgw_port *p, uint8_t *arena, uint32_t arena_len,
                                uint32_t *offsets, uint16_t *lengths, uint16_t max)
{
    (void)p; (void)arena; (void)arena_len; (void)offsets; (void)lengths; (void)max;
    NO_DPDK();
}
WSGW_API int wsgw_port_tx_burst(wsgw_port *p, const uint8_t *buf, const uint32_t *offsets,
                                const uint16_t *lengths, uint16_t n)
{
    (void)p; (void)buf; (void)offsets; (void)lengths; (void)n;
    NO_DPDK();
}

#else /* WSGW_HAVE_DPDK */

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_version.h>

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* The kernel interface's MTU behind a port that has one (af_packet: dev_info's if_index),
 * or 0. */
static uint32_t kernel_link_mtu(uint16_t port_id)
{
    struct rte_eth_dev_info info;
    char name[IF_NAMESIZE];
    if (rte_eth_dev_info_get(port_id, &info) != 0 || info.if_index == 0 ||
        !if_indextoname(info.if_index, name))
        return 0;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
    uint32_t mtu = ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0 ? (uint32_t)ifr.ifr_mtu : 0;
    close(fd);
    return mtu;
}


WSGW_API int wsgw_has_dpdk(void) { return 1; }
WSGW_API const char *wsgw_dpdk_version(void) { return rte_version(); }

WSGW_API int wsgw_eal_init(int argc, char **argv)
{
    if (eal_state == WSGW_EAL_READY) {
        wsgw_set_error("DPDK EAL is already initialised in this process");
        return -EALREADY;
    }
    if (eal_state == WSGW_EAL_CLEANED) {
        wsgw_set_error("DPDK EAL was cleaned up in this process; DPDK cannot be "
                       "initialised twice in one process");
        return -EALREADY;
    }
    int rc = rte_eal_init(argc, argv);
    if (rc < 0) {
        int err = rte_errno ? rte_errno : EINVAL;
        /* DPDK lets a retry through only after argument errors (it resets its run-once
         * flag for those); other failures leave it half-initialised. Say which. */
        if (err == EALREADY) {
            eal_state = WSGW_EAL_FAILED;
            wsgw_set_error("rte_eal_init refused: an earlier init attempt in this process "
                           "left DPDK unable to initialise again (%s)",
                           rte_strerror(err));
        } else {
            wsgw_set_error("rte_eal_init failed: %s", rte_strerror(err));
        }
        return -err;
    }
    eal_state = WSGW_EAL_READY;
    return 0;
}

WSGW_API int wsgw_eal_cleanup(void)
{
    if (eal_state != WSGW_EAL_READY)
        return 0;
    int rc = rte_eal_cleanup();
    eal_state = WSGW_EAL_CLEANED;
    if (rc < 0) {
        wsgw_set_error("rte_eal_cleanup failed: %s", rte_strerror(-rc));
        return rc;
    }
    return 0;
}

WSGW_API int wsgw_thread_register(void)
{
    if (eal_state != WSGW_EAL_READY) {
        wsgw_set_error("DPDK EAL is not initialised");
        return -ENODEV;
    }
    if (rte_lcore_id() != LCORE_ID_ANY)
        return (int)rte_lcore_id(); /* an EAL thread, or registered already */
    if (rte_thread_register() < 0) {
        wsgw_set_error("rte_thread_register: %s", rte_strerror(rte_errno));
        return -rte_errno;
    }
    return (int)rte_lcore_id();
}

WSGW_API void wsgw_thread_unregister(void)
{
    if (eal_state == WSGW_EAL_READY)
        rte_thread_unregister();
}

static int need_eal(void)
{
    if (eal_state != WSGW_EAL_READY) {
        wsgw_set_error("DPDK EAL is not initialised");
        return -ENODEV;
    }
    return 0;
}

/* The device name is what devargs has before the first comma ("net_af_packet0,iface=x",
 * "0000:03:00.0,txq_inline=128"). */
static void devargs_name(const char *devargs, char *name, size_t len)
{
    size_t n = strcspn(devargs, ",");
    if (n >= len)
        n = len - 1;
    memcpy(name, devargs, n);
    name[n] = '\0';
}

WSGW_API int wsgw_port_open(const char *devargs, const struct wsgw_port_conf *conf,
                            wsgw_port **out)
{
    int rc = need_eal();
    if (rc)
        return rc;
    *out = NULL;
    struct wsgw_port *p = calloc(1, sizeof(*p));
    if (!p) {
        wsgw_set_error("out of memory");
        return -ENOMEM;
    }
    devargs_name(devargs, p->devname, sizeof(p->devname));
    uint16_t port_id;
    if (rte_eth_dev_get_port_by_name(p->devname, &port_id) != 0) {
        rc = rte_dev_probe(devargs);
        if (rc < 0) {
            wsgw_set_error("cannot probe device '%s': %s", devargs, rte_strerror(-rc));
            goto fail;
        }
        p->probed = 1;
        if (rte_eth_dev_get_port_by_name(p->devname, &port_id) != 0) {
            wsgw_set_error("device '%s' was probed but is not an ethernet port", p->devname);
            rc = -ENODEV;
            goto fail;
        }
    }
    p->port_id = port_id;
    int socket = rte_eth_dev_socket_id(port_id);
    if (socket < 0)
        socket = (int)rte_socket_id();
    char pool_name[RTE_MEMPOOL_NAMESIZE];
    snprintf(pool_name, sizeof(pool_name), "wsgw_mp%u", port_id);
    /* One mbuf per frame, whatever the MTU: a jumbo frame must not need a chain (the
     * engine's fast path reads single-segment mbufs), and the af_packet PMD refuses a
     * queue whose frames (framesz, see gateway/lab.py `Lab.vdev`) exceed the data room. */
    uint32_t room = RTE_MBUF_DEFAULT_DATAROOM;
    if (conf->mtu && RTE_ALIGN_CEIL((uint32_t)conf->mtu + 128u, 1024u) > room)
        room = RTE_ALIGN_CEIL((uint32_t)conf->mtu + 128u, 1024u);
    p->pool = rte_pktmbuf_pool_create(pool_name, conf->n_mbufs, conf->mbuf_cache, 0,
                                      (uint16_t)(room + RTE_PKTMBUF_HEADROOM), socket);
    if (!p->pool) {
        rc = -(rte_errno ? rte_errno : ENOMEM);
        wsgw_set_error("cannot create mempool of %u mbufs for '%s': %s", conf->n_mbufs,
                       p->devname, rte_strerror(-rc));
        goto fail;
    }
    p->data_room = (uint16_t)(rte_pktmbuf_data_room_size(p->pool) - RTE_PKTMBUF_HEADROOM);

    struct rte_eth_conf eth_conf;
    memset(&eth_conf, 0, sizeof(eth_conf));
    rc = rte_eth_dev_configure(port_id, 1, 1, &eth_conf);
    if (rc < 0) {
        wsgw_set_error("rte_eth_dev_configure(%s): %s", p->devname, rte_strerror(-rc));
        goto fail;
    }
    uint16_t rx_desc = conf->rx_desc, tx_desc = conf->tx_desc;
    rc = rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &rx_desc, &tx_desc);
    if (rc < 0) {
        wsgw_set_error("rte_eth_dev_adjust_nb_rx_tx_desc(%s): %s", p->devname,
                       rte_strerror(-rc));
        goto fail;
    }
    rc = rte_eth_rx_queue_setup(port_id, 0, rx_desc, (unsigned)socket, NULL, p->pool);
    if (rc < 0) {
        wsgw_set_error("rte_eth_rx_queue_setup(%s): %s", p->devname, rte_strerror(-rc));
        goto fail;
    }
    rc = rte_eth_tx_queue_setup(port_id, 0, tx_desc, (unsigned)socket, NULL);
    if (rc < 0) {
        wsgw_set_error("rte_eth_tx_queue_setup(%s): %s", p->devname, rte_strerror(-rc));
        goto fail;
    }
    if (conf->mtu) {
        rc = rte_eth_dev_set_mtu(port_id, conf->mtu);
        /* DPDK 22.11's af_packet caps ethdev's MTU at 1500 (max_rx_pktlen 1518) though its
         * ring frames (framesz) may hold more: a jumbo link whose kernel interface already
         * has the MTU asked for (`wsgw lab up --mtu`) is taken at that MTU. */
        if (rc == -EINVAL && conf->mtu > RTE_ETHER_MTU &&
            kernel_link_mtu(port_id) == conf->mtu) {
            p->link_mtu = conf->mtu;
            rc = 0;
        }
        if (rc < 0 && rc != -ENOTSUP) {
            wsgw_set_error("cannot set MTU %u on '%s': %s", conf->mtu, p->devname,
                           rte_strerror(-rc));
            goto fail;
        }
    }
    if (conf->promiscuous)
        rte_eth_promiscuous_enable(port_id);
    *out = p;
    return 0;
fail:
    wsgw_port_close(p);
    return rc;
}

WSGW_API int wsgw_port_start(wsgw_port *p)
{
    if (p->started)
        return 0;
    int rc = rte_eth_dev_start(p->port_id);
    if (rc < 0) {
        wsgw_set_error("rte_eth_dev_start(%s): %s", p->devname, rte_strerror(-rc));
        return rc;
    }
    p->started = 1;
    return 0;
}

WSGW_API int wsgw_port_stop(wsgw_port *p)
{
    if (!p->started)
        return 0;
    int rc = rte_eth_dev_stop(p->port_id);
    p->started = 0;
    if (rc < 0) {
        wsgw_set_error("rte_eth_dev_stop(%s): %s", p->devname, rte_strerror(-rc));
        return rc;
    }
    return 0;
}

WSGW_API void wsgw_port_close(wsgw_port *p)
{
    if (!p)
        return;
    if (p->started)
        wsgw_port_stop(p);
    if (rte_eth_dev_is_valid_port(p->port_id) && (p->probed || p->pool)) {
        rte_eth_dev_close(p->port_id);
    }
    if (p->probed) {
        /* Hot-unplug what we hot-plugged, so the same device can be opened again. */
        rte_eal_hotplug_remove(strncmp(p->devname, "net_", 4) == 0 ? "vdev" : "pci",
                               p->devname);
    }
    if (p->pool)
        rte_mempool_free(p->pool);
    free(p);
}

WSGW_API int wsgw_port_id(const wsgw_port *p) { return p->port_id; }

WSGW_API int wsgw_port_mac(const wsgw_port *p, uint8_t mac[6])
{
    struct rte_ether_addr addr;
    int rc = rte_eth_macaddr_get(p->port_id, &addr);
    if (rc < 0) {
        wsgw_set_error("rte_eth_macaddr_get(%s): %s", p->devname, rte_strerror(-rc));
        return rc;
    }
    memcpy(mac, addr.addr_bytes, 6);
    return 0;
}

WSGW_API int wsgw_port_mtu(const wsgw_port *p)
{
    if (p->link_mtu)
        return p->link_mtu;
    uint16_t mtu;
    int rc = rte_eth_dev_get_mtu(p->port_id, &mtu);
    if (rc < 0) {
        wsgw_set_error("rte_eth_dev_get_mtu(%s): %s", p->devname, rte_strerror(-rc));
        return rc;
    }
    return mtu;
}

WSGW_API int wsgw_port_link(const wsgw_port *p, struct wsgw_link_info *out)
{
    struct rte_eth_link link;
    memset(&link, 0, sizeof(link));
    int rc = rte_eth_link_get_nowait(p->port_id, &link);
    if (rc < 0) {
        wsgw_set_error("rte_eth_link_get_nowait(%s): %s", p->devname, rte_strerror(-rc));
        return rc;
    }
    out->speed_mbps = link.link_speed;
    out->up = link.link_status;
    out->full_duplex = link.link_duplex;
    return 0;
}

WSGW_API int wsgw_port_stats(const wsgw_port *p, struct wsgw_port_stats *out)
{
    struct rte_eth_stats st;
    int rc = rte_eth_stats_get(p->port_id, &st);
    if (rc < 0) {
        wsgw_set_error("rte_eth_stats_get(%s): %s", p->devname, rte_strerror(-rc));
        return rc;
    }
    out->rx_packets = st.ipackets;
    out->rx_bytes = st.ibytes;
    out->tx_packets = st.opackets;
    out->tx_bytes = st.obytes;
    out->rx_missed = st.imissed;
    out->rx_errors = st.ierrors;
    out->tx_errors = st.oerrors;
    out->rx_nombuf = st.rx_nombuf;
    out->tx_dropped = p->tx_dropped;
    out->tx_nombuf = p->tx_nombuf;
    out->tx_oversize = p->tx_oversize;
    out->rx_truncated = p->rx_truncated;
    return 0;
}

WSGW_API int wsgw_port_rx_burst(wsgw_port *p, uint8_t *arena, uint32_t arena_len,
                                uint32_t *offsets, uint16_t *lengths, uint16_t max)
{
    struct rte_mbuf *pkts[BURST_MAX];
    if (max > BURST_MAX)
        max = BURST_MAX;
    uint16_t n = rte_eth_rx_burst(p->port_id, 0, pkts, max);
    uint32_t used = 0;
    int out = 0;
    for (uint16_t i = 0; i < n; i++) {
        struct rte_mbuf *m = pkts[i];
        uint32_t len = rte_pktmbuf_pkt_len(m);
        if (unlikely(len > 0xffff || used + len > arena_len)) {
            p->rx_truncated++;
            rte_pktmbuf_free(m);
            continue;
        }
        const void *src = rte_pktmbuf_read(m, 0, len, arena + used);
        if (src != arena + used)
            memcpy(arena + used, src, len);
        offsets[out] = used;
        lengths[out] = (uint16_t)len;
        used += len;
        out++;
        rte_pktmbuf_free(m);
    }
    return out;
}

WSGW_API int wsgw_port_tx_burst(wsgw_port *p, const uint8_t *buf, const uint32_t *offsets,
                                const uint16_t *lengths, uint16_t n)
{
    struct rte_mbuf *pkts[BURST_MAX];
    int total = 0;
    while (n > 0) {
        uint16_t chunk = n > BURST_MAX ? BURST_MAX : n;
        uint16_t ready = 0;
        for (uint16_t i = 0; i < chunk; i++) {
            uint16_t len = lengths[i];
            if (unlikely(len > p->data_room)) {
                p->tx_oversize++;
                continue;
            }
            struct rte_mbuf *m = rte_pktmbuf_alloc(p->pool);
            if (unlikely(!m)) {
                p->tx_nombuf++;
                continue;
            }
            char *dst = rte_pktmbuf_append(m, len);
            memcpy(dst, buf + offsets[i], len);
            pkts[ready++] = m;
        }
        uint16_t sent = rte_eth_tx_burst(p->port_id, 0, pkts, ready);
        if (unlikely(sent < ready)) {
            p->tx_dropped += (uint64_t)(ready - sent);
            rte_pktmbuf_free_bulk(&pkts[sent], ready - sent);
        }
        total += sent;
        offsets += chunk;
        lengths += chunk;
        n = (uint16_t)(n - chunk);
    }
    return total;
}

#endif /* WSGW_HAVE_DPDK */
