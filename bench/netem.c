/* pipebench-netem: a delaying TCP proxy for tests and benchmarks of remote storage.
 *
 * This kernel has no `tc netem`, so round-trip time, jitter and a bandwidth cap come from this
 * proxy between client and server on the loopback address:
 *
 *   pipebench-netem --target 127.0.0.1:8080 [--listen PORT] [--port-file F] [--delay MS]
 *                   [--jitter MS] [--rate BYTES_PER_S] [--link-rate BYTES_PER_S]
 *                   [--fault KIND] [--after BYTES]
 *                   [--first K] [--faults N] [--stats F]
 *
 * Every chunk read from one side is forwarded to the other after delay + uniform(0, jitter)
 * milliseconds (order kept), so a request/response exchange costs twice the delay: --delay 10
 * is a 20 ms round trip. --rate caps each direction of each connection; --link-rate caps each
 * direction of all connections together, as one shared link would (a reader that spreads its
 * reads over many connections still gets no more than the link). Faults, on the first N
 * connections from the K-th on (--first, default 1; --faults, default all), for the error tests of
 * the http backend:
 *   close        the server's answer is cut after --after bytes and the connection closed
 *   stall        the server's answer stops after --after bytes; the connection stays open
 *   http500      the request is answered "500 Internal Server Error" (the server never sees it)
 *   reset        the request is answered with a TCP reset
 *   wrong-length the first Content-Length of the answer is one less than the server sent
 * The port is printed as "listening 127.0.0.1:PORT" on stdout (and written to --port-file);
 * SIGTERM or SIGINT ends it, writing "connections N up BYTES down BYTES" to --stats, and on a
 * second line "waiting_peak P": the most requests at once that had reached the proxy and not yet
 * had a byte of their answer back (requests in flight, whichever connections carry them). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 512
#define CHUNK 65536
#define QUEUE_LIMIT (8u << 20) /* bytes waiting per direction before reading stops */
/* --rate: a direction may run this far ahead of its byte budget, so that the cap is reached in
 * bursts of about a millisecond instead of one 16 KiB write per wake-up (which held a
 * connection near 16 MB/s whatever the cap). */
#define RATE_SLACK_NS 1000000

enum fault { F_NONE, F_CLOSE, F_STALL, F_HTTP500, F_RESET, F_WRONG_LENGTH };

typedef struct chunk {
  struct chunk *next;
  int64_t due_ns;
  size_t len, off;
  int eof; /* the sender closed its side here */
  unsigned char data[];
} chunk;

typedef struct dir {
  int from, to;
  chunk *head, *tail;
  size_t queued;
  int64_t last_due, next_free_ns;
  int read_eof, done;
  uint64_t sent;
} dir;

typedef struct conn {
  int used;
  int cfd, sfd;
  dir d[2]; /* 0: client to server, 1: server to client */
  enum fault fault;
  int answered; /* http500/reset: the canned answer went out */
  int rewritten;
  int waiting; /* bytes came from the client and none of the answer has gone back yet */
} conn;

static struct {
  struct sockaddr_in target;
  int64_t delay_ns, jitter_ns;
  double rate, link_rate;
  int64_t link_free_ns[2]; /* --link-rate: when each direction's shared budget is next free */
  enum fault fault;
  uint64_t after;
  long first;  /* the first connection (1-based) that gets the fault */
  long faults; /* connections that get the fault; -1: all from first on */
  long accepted;
  long waiting, waiting_peak;
  uint64_t up, down;
  const char *stats;
  uint64_t rng;
} g = {.first = 1, .faults = -1, .rng = 0x9e3779b97f4a7c15u};

static volatile sig_atomic_t stop;
static conn conns[MAX_CONNS];

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t rnd(void) {
  g.rng ^= g.rng << 13;
  g.rng ^= g.rng >> 7;
  g.rng ^= g.rng << 17;
  return g.rng;
}

static void die(const char *what) {
  fprintf(stderr, "pipebench-netem: %s: %s\n", what, strerror(errno));
  exit(2);
}

static void usage(void) {
  fprintf(stderr, "usage: pipebench-netem --target HOST:PORT [--listen PORT] [--port-file F]\n"
                  "       [--delay MS] [--jitter MS] [--rate BYTES_PER_S] [--link-rate BYTES_PER_S]\n"
                  "       [--fault close|stall|http500|reset|wrong-length]\n"
                  "       [--after BYTES] [--first K] [--faults N] [--stats F]\n");
  exit(1);
}

static void nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static void push(dir *d, const unsigned char *p, size_t n, int eof) {
  chunk *c = malloc(sizeof *c + n);
  if (!c) die("out of memory");
  c->next = NULL;
  c->len = n;
  c->off = 0;
  c->eof = eof;
  if (n) memcpy(c->data, p, n);
  int64_t due = now_ns() + g.delay_ns;
  if (g.jitter_ns > 0) due += (int64_t)(rnd() % (uint64_t)g.jitter_ns);
  if (due < d->last_due) due = d->last_due; /* jitter never reorders bytes */
  d->last_due = due;
  c->due_ns = due;
  if (d->tail)
    d->tail->next = c;
  else
    d->head = c;
  d->tail = c;
  d->queued += n;
}

static void conn_close(conn *c) {
  if (c->waiting) g.waiting--;
  for (int i = 0; i < 2; i++) {
    chunk *k = c->d[i].head;
    while (k) {
      chunk *n = k->next;
      free(k);
      k = n;
    }
  }
  if (c->cfd >= 0) close(c->cfd);
  if (c->sfd >= 0) close(c->sfd);
  memset(c, 0, sizeof *c);
}

/* Content-Length: N in an answer's head becomes N-1 (wrong-length fault). */
static size_t rewrite_length(unsigned char *p, size_t n) {
  const char key[] = "\r\ncontent-length:";
  size_t kl = sizeof key - 1;
  for (size_t i = 0; i + kl < n; i++) {
    if (strncasecmp((const char *)p + i, key, kl) != 0) continue;
    size_t j = i + kl;
    while (j < n && p[j] == ' ') j++;
    size_t s = j;
    unsigned long long v = 0;
    while (j < n && p[j] >= '0' && p[j] <= '9') v = v * 10 + (unsigned long long)(p[j++] - '0');
    if (j == s || v == 0) return n;
    char num[32];
    int nl = snprintf(num, sizeof num, "%llu", v - 1);
    size_t old = j - s;
    /* the new number is as long or one digit shorter: shift the rest left */
    memcpy(p + s, num, (size_t)nl);
    memmove(p + s + (size_t)nl, p + j, n - j);
    return n - (old - (size_t)nl);
  }
  return n;
}

static void new_conn(int lfd) {
  int cfd = accept(lfd, NULL, NULL);
  if (cfd < 0) return;
  int slot = -1;
  for (int i = 0; i < MAX_CONNS; i++)
    if (!conns[i].used) {
      slot = i;
      break;
    }
  if (slot < 0) {
    close(cfd);
    return;
  }
  conn *c = &conns[slot];
  memset(c, 0, sizeof *c);
  c->used = 1;
  c->cfd = cfd;
  c->sfd = -1;
  g.accepted++;
  c->fault = g.accepted >= g.first && (g.faults < 0 || g.accepted < g.first + g.faults)
                 ? g.fault
                 : F_NONE;
  int one = 1;
  setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  nonblock(cfd);
  if (c->fault != F_HTTP500 && c->fault != F_RESET) {
    int sfd = socket(AF_INET, SOCK_STREAM, 0);
    if (sfd < 0 || connect(sfd, (struct sockaddr *)&g.target, sizeof g.target) != 0) {
      if (sfd >= 0) close(sfd);
      c->sfd = -1;
      conn_close(c);
      return;
    }
    setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    nonblock(sfd);
    c->sfd = sfd;
  }
  c->d[0].from = cfd;
  c->d[0].to = c->sfd;
  c->d[1].from = c->sfd;
  c->d[1].to = cfd;
}

/* A canned fault answer once the request head has arrived. */
static void answer_fault(conn *c, const unsigned char *p, size_t n) {
  if (c->answered || !memmem(p, n, "\r\n\r\n", 4)) return;
  c->answered = 1;
  if (c->fault == F_RESET) {
    struct linger lg = {1, 0};
    setsockopt(c->cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    conn_close(c);
    return;
  }
  static const char r[] = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n"
                          "Connection: close\r\n\r\n";
  push(&c->d[1], (const unsigned char *)r, sizeof r - 1, 0);
  push(&c->d[1], NULL, 0, 1);
}

static void do_read(conn *c, int i) {
  dir *d = &c->d[i];
  unsigned char buf[CHUNK];
  ssize_t n = read(d->from, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    d->read_eof = 1;
    if (i == 0 && (c->fault == F_HTTP500 || c->fault == F_RESET)) {
      if (!c->answered) conn_close(c);
      return;
    }
    push(d, NULL, 0, 1);
    return;
  }
  size_t len = (size_t)n;
  if (i == 0) {
    g.up += len;
    if (!c->waiting) {
      c->waiting = 1;
      if (++g.waiting > g.waiting_peak) g.waiting_peak = g.waiting;
    }
    if (c->fault == F_HTTP500 || c->fault == F_RESET) {
      answer_fault(c, buf, len);
      return;
    }
  } else if (c->fault == F_WRONG_LENGTH && !c->rewritten) {
    c->rewritten = 1;
    len = rewrite_length(buf, len);
  }
  push(d, buf, len, 0);
}

/* Forwards what is due; returns 1 when the connection was closed. */
static int do_write(conn *c, int i, int64_t now) {
  dir *d = &c->d[i];
  while (d->head && d->head->due_ns <= now && d->next_free_ns <= now + RATE_SLACK_NS &&
         g.link_free_ns[i] <= now + RATE_SLACK_NS) {
    chunk *k = d->head;
    int faulted = i == 1 && (c->fault == F_CLOSE || c->fault == F_STALL);
    if (faulted && d->sent >= g.after) {
      if (c->fault == F_CLOSE) {
        conn_close(c);
        return 1;
      }
      /* stall: swallow the rest and the server's close, answer nothing more */
      d->queued -= k->len - k->off;
      d->head = k->next;
      if (!d->head) d->tail = NULL;
      free(k);
      continue;
    }
    if (k->eof) {
      if (c->fault == F_HTTP500 && i == 1) {
        conn_close(c);
        return 1;
      }
      shutdown(d->to, SHUT_WR);
      d->done = 1;
      d->head = k->next;
      if (!d->head) d->tail = NULL;
      free(k);
      continue;
    }
    size_t want = k->len - k->off;
    if ((g.rate > 0 || g.link_rate > 0) && want > 16384) want = 16384;
    if (faulted && want > g.after - d->sent) want = (size_t)(g.after - d->sent);
    ssize_t n = write(d->to, k->data + k->off, want);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return 0;
      conn_close(c);
      return 1;
    }
    k->off += (size_t)n;
    d->sent += (uint64_t)n;
    d->queued -= (size_t)n;
    if (i == 1) g.down += (uint64_t)n;
    if (i == 1 && c->waiting) {
      c->waiting = 0;
      g.waiting--;
    }
    if (g.rate > 0) {
      int64_t base = d->next_free_ns > now ? d->next_free_ns : now;
      d->next_free_ns = base + (int64_t)((double)n * 1e9 / g.rate);
    }
    if (g.link_rate > 0) {
      int64_t base = g.link_free_ns[i] > now ? g.link_free_ns[i] : now;
      g.link_free_ns[i] = base + (int64_t)((double)n * 1e9 / g.link_rate);
    }
    if (k->off == k->len) {
      d->head = k->next;
      if (!d->head) d->tail = NULL;
      free(k);
    }
  }
  return 0;
}

static void write_stats(void) {
  if (!g.stats) return;
  FILE *f = fopen(g.stats, "w");
  if (!f) return;
  fprintf(f, "connections %ld up %llu down %llu\nwaiting_peak %ld\n", g.accepted,
          (unsigned long long)g.up, (unsigned long long)g.down, g.waiting_peak);
  fclose(f);
}

static void parse_args(int argc, char **argv, int *port, const char **port_file) {
  int have_target = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) usage();
    const char *v = argv[++i];
    if (!strcmp(a, "--target")) {
      char host[64];
      const char *colon = strrchr(v, ':');
      if (!colon || (size_t)(colon - v) >= sizeof host) usage();
      memcpy(host, v, (size_t)(colon - v));
      host[colon - v] = 0;
      g.target.sin_family = AF_INET;
      g.target.sin_port = htons((uint16_t)atoi(colon + 1));
      if (inet_pton(AF_INET, host, &g.target.sin_addr) != 1) usage();
      have_target = 1;
    } else if (!strcmp(a, "--listen")) {
      *port = atoi(v);
    } else if (!strcmp(a, "--port-file")) {
      *port_file = v;
    } else if (!strcmp(a, "--delay")) {
      g.delay_ns = (int64_t)(atof(v) * 1e6);
    } else if (!strcmp(a, "--jitter")) {
      g.jitter_ns = (int64_t)(atof(v) * 1e6);
    } else if (!strcmp(a, "--rate")) {
      g.rate = atof(v);
    } else if (!strcmp(a, "--link-rate")) {
      g.link_rate = atof(v);
    } else if (!strcmp(a, "--after")) {
      g.after = strtoull(v, NULL, 10);
    } else if (!strcmp(a, "--first")) {
      g.first = atol(v);
    } else if (!strcmp(a, "--faults")) {
      g.faults = atol(v);
    } else if (!strcmp(a, "--stats")) {
      g.stats = v;
    } else if (!strcmp(a, "--fault")) {
      if (!strcmp(v, "close")) g.fault = F_CLOSE;
      else if (!strcmp(v, "stall")) g.fault = F_STALL;
      else if (!strcmp(v, "http500")) g.fault = F_HTTP500;
      else if (!strcmp(v, "reset")) g.fault = F_RESET;
      else if (!strcmp(v, "wrong-length")) g.fault = F_WRONG_LENGTH;
      else usage();
    } else {
      usage();
    }
  }
  if (!have_target || g.delay_ns < 0 || g.jitter_ns < 0 || g.rate < 0 || g.link_rate < 0)
    usage();
}

int main(int argc, char **argv) {
  int port = 0;
  const char *port_file = NULL;
  parse_args(argc, argv, &port, &port_file);
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  g.rng ^= (uint64_t)now_ns();

  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  if (lfd < 0) die("socket");
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  la.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(lfd, (struct sockaddr *)&la, sizeof la) != 0) die("bind");
  if (listen(lfd, 128) != 0) die("listen");
  socklen_t ll = sizeof la;
  getsockname(lfd, (struct sockaddr *)&la, &ll);
  nonblock(lfd);
  if (port_file) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *f = fopen(tmp, "w");
    if (!f) die(port_file);
    fprintf(f, "%d\n", ntohs(la.sin_port));
    fclose(f);
    if (rename(tmp, port_file) != 0) die(port_file);
  }
  printf("listening 127.0.0.1:%d\n", ntohs(la.sin_port));
  fflush(stdout);

  static struct pollfd pf[1 + 2 * MAX_CONNS];
  static int pc[1 + 2 * MAX_CONNS], pd[1 + 2 * MAX_CONNS];
  while (!stop) {
    int64_t now = now_ns(), next = now + 1000000000;
    int n = 0;
    pf[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
    for (int ci = 0; ci < MAX_CONNS; ci++) {
      conn *c = &conns[ci];
      if (!c->used) continue;
      for (int i = 0; i < 2; i++) {
        dir *d = &c->d[i];
        short ev = 0;
        if (d->from >= 0 && !d->read_eof && d->queued < QUEUE_LIMIT) ev |= POLLIN;
        if (d->head && d->to >= 0) {
          int64_t free_at = (d->next_free_ns > g.link_free_ns[i] ? d->next_free_ns
                                                                 : g.link_free_ns[i]) -
                            RATE_SLACK_NS;
          int64_t at = d->head->due_ns > free_at ? d->head->due_ns : free_at;
          if (at <= now)
            ev |= POLLOUT;
          else if (at < next)
            next = at;
        }
        /* POLLIN watches d->from, POLLOUT d->to: two entries */
        if (ev & POLLIN) {
          pf[n] = (struct pollfd){.fd = d->from, .events = POLLIN};
          pc[n] = ci;
          pd[n++] = i;
        }
        if (ev & POLLOUT) {
          pf[n] = (struct pollfd){.fd = d->to, .events = POLLOUT};
          pc[n] = ci;
          pd[n++] = i + 2;
        }
      }
    }
    /* ppoll: a timeout in nanoseconds, so delays and the rate are not rounded to milliseconds */
    int64_t wait = next > now ? next - now : 0;
    struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000),
                          .tv_nsec = (long)(wait % 1000000000)};
    if (ppoll(pf, (nfds_t)n, &ts, NULL) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (pf[0].revents & POLLIN) new_conn(lfd);
    now = now_ns();
    for (int k = 1; k < n; k++) {
      conn *c = &conns[pc[k]];
      if (!c->used || !pf[k].revents) continue;
      if (pd[k] < 2)
        do_read(c, pd[k]);
      else
        do_write(c, pd[k] - 2, now);
    }
    /* writes that became due, and connections whose two directions are over */
    now = now_ns();
    for (int ci = 0; ci < MAX_CONNS; ci++) {
      conn *c = &conns[ci];
      if (!c->used) continue;
      for (int i = 0; i < 2 && c->used; i++)
        if (c->d[i].to >= 0) do_write(c, i, now);
      if (c->used && c->sfd >= 0 && c->d[0].done && c->d[1].done) conn_close(c);
    }
  }
  write_stats();
  return 0;
}
