/* evloop: see evloop.h. epoll for readiness, curl_multi_socket_action for transfers spread
 * over a few multi handles (ARCHITECTURE.md §6.5), a binary heap of timers, an eventfd for
 * posts from other threads. */
#include "evloop.h"
#include "id.h"
#include "log.h"
#include "mem.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define S_EVENTS_MAX 256
#define S_WAKE_TAG   UINT32_MAX /* the epoll tag of the eventfd; a multi's tag is its index */

struct evloop_timer {
    int64_t at;
    uint64_t seq; /* ties run in the order they were set */
    size_t index; /* position in the heap */
    evloop_fn *fn;
    void *arg;
};

typedef struct s_post {
    evloop_fn *fn;
    void *arg;
    struct s_post *next;
} s_post_t;

typedef struct {
    evloop_done_fn *done;
    void *arg;
    int multi; /* the index of the multi handle that holds it */
} s_xfer_t;

/* One multi handle and the transfers it holds. */
typedef struct {
    evloop_t *loop;
    uint32_t index;
    CURLM *multi;
    int64_t curl_at; /* when libcurl wants its timeout action; -1: never */
    size_t transfers;
} s_multi_t;

struct evloop {
    int epfd;
    int wakefd;
    s_multi_t multis[EVLOOP_MULTIS_MAX];
    atomic_size_t nmultis; /* made on demand, never fewer than one; read by evloop_stats */
    evloop_timer_t **heap;
    size_t nheap, capheap;
    uint64_t seq;
    pthread_mutex_t lock; /* guards the post queue and stop */
    s_post_t *head, *tail;
    bool stop;
    bool started;
    pthread_t thread;
    atomic_size_t transfers;
    atomic_size_t timers;
};

/* --- Timer heap. --- */

static bool s_before(const evloop_timer_t *a, const evloop_timer_t *b) {
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static void s_swap(evloop_t *self, size_t i, size_t j) {
    evloop_timer_t *t = self->heap[i];
    self->heap[i] = self->heap[j];
    self->heap[j] = t;
    self->heap[i]->index = i;
    self->heap[j]->index = j;
}

static void s_up(evloop_t *self, size_t i) {
    while (i > 0 && s_before(self->heap[i], self->heap[(i - 1) / 2])) {
        s_swap(self, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void s_down(evloop_t *self, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < self->nheap && s_before(self->heap[l], self->heap[m])) {
            m = l;
        }
        if (r < self->nheap && s_before(self->heap[r], self->heap[m])) {
            m = r;
        }
        if (m == i) {
            return;
        }
        s_swap(self, i, m);
        i = m;
    }
}

static void s_heap_remove(evloop_t *self, size_t i) {
    self->nheap--;
    if (i != self->nheap) {
        self->heap[i] = self->heap[self->nheap];
        self->heap[i]->index = i;
        s_down(self, i);
        s_up(self, i);
    }
    atomic_store(&self->timers, self->nheap);
}

evloop_timer_t *evloop_timer_at(evloop_t *self, int64_t at_ms, evloop_fn *fn, void *arg) {
    if (self->nheap == self->capheap) {
        self->capheap = self->capheap ? self->capheap * 2 : 64;
        self->heap = mem_realloc(self->heap, self->capheap * sizeof *self->heap);
    }
    evloop_timer_t *t = mem_calloc(1, sizeof *t);
    *t = (evloop_timer_t){
        .at = at_ms, .seq = self->seq++, .index = self->nheap, .fn = fn, .arg = arg};
    self->heap[self->nheap++] = t;
    s_up(self, t->index);
    atomic_store(&self->timers, self->nheap);
    return t;
}

void evloop_timer_cancel(evloop_t *self, evloop_timer_t *timer) {
    if (!timer) {
        return;
    }
    ASSERT(timer->index < self->nheap && self->heap[timer->index] == timer);
    s_heap_remove(self, timer->index);
    free(timer);
}

/* Runs every timer due at now; a timer set by one of them for now runs on the next turn. */
static void s_run_timers(evloop_t *self, int64_t now) {
    uint64_t limit = self->seq;
    while (self->nheap > 0 && self->heap[0]->at <= now && self->heap[0]->seq < limit) {
        evloop_timer_t *t = self->heap[0];
        s_heap_remove(self, 0);
        evloop_fn *fn = t->fn;
        void *arg = t->arg;
        free(t);
        fn(arg);
    }
}

/* --- libcurl's socket API. --- */

/* An epoll entry's data: the socket and the multi it belongs to. */
static uint64_t s_tag(uint32_t multi, int fd) {
    return (uint64_t)multi << 32 | (uint32_t)fd;
}

static int s_on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
    (void)easy;
    (void)socketp;
    s_multi_t *m = userp;
    evloop_t *self = m->loop;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(self->epfd, EPOLL_CTL_DEL, fd, NULL);
        return 0;
    }
    struct epoll_event ev = {.data.u64 = s_tag(m->index, fd)};
    ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
    if (epoll_ctl(self->epfd, EPOLL_CTL_MOD, fd, &ev) != 0 && errno == ENOENT) {
        if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            log_error("evloop_epoll_failed", "fd=%d errno=%d", (int)fd, errno);
        }
    }
    return 0;
}

static int s_on_timer(CURLM *multi, long timeout_ms, void *userp) {
    (void)multi;
    s_multi_t *m = userp;
    m->curl_at = timeout_ms < 0 ? -1 : id_now_ms() + timeout_ms;
    return 0;
}

static void s_multi_init(evloop_t *self, s_multi_t *m) {
    *m = (s_multi_t){.loop = self, .index = (uint32_t)(m - self->multis), .curl_at = -1};
    m->multi = curl_multi_init();
    ASSERT(m->multi);
    curl_multi_setopt(m->multi, CURLMOPT_SOCKETFUNCTION, s_on_socket);
    curl_multi_setopt(m->multi, CURLMOPT_SOCKETDATA, m);
    curl_multi_setopt(m->multi, CURLMOPT_TIMERFUNCTION, s_on_timer);
    curl_multi_setopt(m->multi, CURLMOPT_TIMERDATA, m);
}

/* The multi handle a new transfer joins: the one holding the fewest (the first of equals, so
 * that calls one after another find the connection the last one left idle), or a new one when
 * every one holds EVLOOP_MULTI_FILL and the cap allows. libcurl looks for a connection to reuse
 * by walking every connection its handle has to the same host, busy ones included: with
 * thousands of HTTP/1.1 streams to one server, one handle would make each new call walk them
 * all. */
static s_multi_t *s_pick(evloop_t *self) {
    s_multi_t *best = &self->multis[0];
    for (size_t i = 1; i < self->nmultis; i++) {
        if (self->multis[i].transfers < best->transfers) {
            best = &self->multis[i];
        }
    }
    if (best->transfers >= EVLOOP_MULTI_FILL && self->nmultis < EVLOOP_MULTIS_MAX) {
        best = &self->multis[self->nmultis];
        s_multi_init(self, best);
        self->nmultis++;
    }
    return best;
}

/* Hands every finished transfer of m to its done callback. */
static void s_reap(s_multi_t *m) {
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m->multi, &left))) {
        if (msg->msg != CURLMSG_DONE) {
            continue;
        }
        CURL *easy = msg->easy_handle;
        CURLcode result = msg->data.result;
        s_xfer_t *x = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
        curl_multi_remove_handle(m->multi, easy);
        m->transfers--;
        atomic_fetch_sub(&m->loop->transfers, 1);
        evloop_done_fn *done = x->done;
        void *arg = x->arg;
        free(x);
        done(arg, result);
    }
}

void evloop_curl_add(evloop_t *self, CURL *easy, evloop_done_fn *done, void *arg) {
    s_multi_t *m = s_pick(self);
    s_xfer_t *x = mem_calloc(1, sizeof *x);
    *x = (s_xfer_t){done, arg, (int)m->index};
    curl_easy_setopt(easy, CURLOPT_PRIVATE, x);
    m->transfers++;
    atomic_fetch_add(&self->transfers, 1);
    CURLMcode mc = curl_multi_add_handle(m->multi, easy);
    ASSERT(mc == CURLM_OK); /* fails only for a handle already added: a programmer error */
}

void evloop_curl_remove(evloop_t *self, CURL *easy) {
    s_xfer_t *x = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
    s_multi_t *m = &self->multis[x->multi];
    curl_multi_remove_handle(m->multi, easy);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
    m->transfers--;
    atomic_fetch_sub(&self->transfers, 1);
    free(x);
}

/* --- Posts. --- */

void evloop_post(evloop_t *self, evloop_fn *fn, void *arg) {
    s_post_t *p = mem_calloc(1, sizeof *p);
    *p = (s_post_t){fn, arg, NULL};
    pthread_mutex_lock(&self->lock);
    if (self->tail) {
        self->tail->next = p;
    } else {
        self->head = p;
    }
    self->tail = p;
    pthread_mutex_unlock(&self->lock);
    uint64_t one = 1;
    ssize_t n = write(self->wakefd, &one, sizeof one);
    (void)n; /* a full counter (EAGAIN) already wakes the loop */
}

static void s_run_posts(evloop_t *self) {
    pthread_mutex_lock(&self->lock);
    s_post_t *p = self->head;
    self->head = self->tail = NULL;
    pthread_mutex_unlock(&self->lock);
    while (p) {
        s_post_t *next = p->next;
        p->fn(p->arg);
        free(p);
        p = next;
    }
}

/* --- The loop. --- */

evloop_t *evloop_new(void) {
    evloop_t *self = mem_calloc(1, sizeof *self);
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    self->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ASSERT(self->epfd >= 0 && self->wakefd >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = s_tag(S_WAKE_TAG, self->wakefd)};
    ASSERT(epoll_ctl(self->epfd, EPOLL_CTL_ADD, self->wakefd, &ev) == 0);
    ASSERT(pthread_mutex_init(&self->lock, NULL) == 0);
    s_multi_init(self, &self->multis[0]);
    self->nmultis = 1;
    return self;
}

static int s_timeout(const evloop_t *self, int max_ms, int64_t now) {
    int64_t at = now + max_ms;
    if (self->nheap > 0 && self->heap[0]->at < at) {
        at = self->heap[0]->at;
    }
    for (size_t i = 0; i < self->nmultis; i++) {
        int64_t c = self->multis[i].curl_at;
        if (c >= 0 && c < at) {
            at = c;
        }
    }
    return at <= now ? 0 : (int)(at - now);
}

void evloop_run_once(evloop_t *self, int timeout_ms) {
    struct epoll_event evs[S_EVENTS_MAX];
    int n = epoll_wait(self->epfd, evs, S_EVENTS_MAX, s_timeout(self, timeout_ms, id_now_ms()));
    int running = 0;
    for (int i = 0; i < n; i++) {
        uint32_t tag = (uint32_t)(evs[i].data.u64 >> 32);
        int fd = (int)(uint32_t)evs[i].data.u64;
        if (tag == S_WAKE_TAG) {
            uint64_t v;
            ssize_t r = read(self->wakefd, &v, sizeof v);
            (void)r;
            continue;
        }
        int flags = (evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
                    (evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                    (evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
        curl_multi_socket_action(self->multis[tag].multi, fd, flags, &running);
    }
    int64_t now = id_now_ms();
    for (size_t i = 0; i < self->nmultis; i++) {
        s_multi_t *m = &self->multis[i];
        if (m->curl_at >= 0 && m->curl_at <= now) {
            m->curl_at = -1;
            curl_multi_socket_action(m->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        s_reap(m);
    }
    s_run_timers(self, now);
    s_run_posts(self);
}

static void *s_thread(void *arg) {
    evloop_t *self = arg;
    for (;;) {
        pthread_mutex_lock(&self->lock);
        bool stop = self->stop;
        pthread_mutex_unlock(&self->lock);
        if (stop) {
            return NULL;
        }
        evloop_run_once(self, 1000);
    }
}

int evloop_start(evloop_t *self) {
    if (pthread_create(&self->thread, NULL, s_thread, self) != 0) {
        return -1;
    }
    self->started = true;
    return 0;
}

static void s_stop(void *arg) {
    evloop_t *self = arg;
    pthread_mutex_lock(&self->lock);
    self->stop = true;
    pthread_mutex_unlock(&self->lock);
}

void evloop_stats(const evloop_t *self, evloop_stats_t *out) {
    out->transfers = atomic_load(&self->transfers);
    out->multis = atomic_load(&self->nmultis);
    out->timers = atomic_load(&self->timers);
}

void evloop_destroy(evloop_t **self_p) {
    evloop_t *self = *self_p;
    if (!self) {
        return;
    }
    if (self->started) {
        evloop_post(self, s_stop, self);
        pthread_join(self->thread, NULL);
    }
    s_post_t *p = self->head;
    while (p) {
        s_post_t *next = p->next;
        free(p);
        p = next;
    }
    for (size_t i = 0; i < self->nheap; i++) {
        free(self->heap[i]);
    }
    free(self->heap);
    for (size_t i = 0; i < self->nmultis; i++) {
        curl_multi_cleanup(self->multis[i].multi); /* transfers left are detached, not freed */
    }
    pthread_mutex_destroy(&self->lock);
    close(self->wakefd);
    close(self->epfd);
    free(self);
    *self_p = NULL;
}
