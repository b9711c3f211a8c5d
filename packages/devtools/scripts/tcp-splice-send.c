// Loopback TCP from a 512 MiB arena into another, one connection, two threads: the sender either send()s each
// piece (the kernel copies it into socket buffers, as raw TCP and the peer plane do) or vmsplice()s the piece's
// pages into a pipe and splice()s them to the socket (the kernel takes page references, no send-side copy).
// Prints GiB/s and this process's CPU s/GiB (both ends), and checks the bytes. Session 19's question: would a
// splice-based send take the sender's copy off the peer plane's CPU bill on loopback?
//   gcc -O2 -o /tmp/tcp-splice-send packages/devtools/scripts/tcp-splice-send.c -lpthread
//   for i in 1 2 3; do /tmp/tcp-splice-send send; /tmp/tcp-splice-send splice; done   # [piece bytes, default 262144]
#define _GNU_SOURCE
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static const size_t kArena = 512ul << 20, kTotal = 4ul << 30;
static size_t piece = 256 << 10;
static int listener;
static char *src, *dst;

static void die(const char* what) {
  perror(what);
  exit(1);
}

static double Seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static double CpuSeconds(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

static void* Receive(void* unused) {
  (void)unused;
  int fd = accept(listener, NULL, NULL), buf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  for (size_t got = 0; got < kTotal;) {
    ssize_t r = recv(fd, dst + got % kArena, piece - got % piece, MSG_WAITALL);
    if (r <= 0) die("recv");
    got += (size_t)r;
  }
  close(fd);
  return NULL;
}

int main(int argc, char** argv) {
  int spliced = argc > 1 && strcmp(argv[1], "splice") == 0;
  if (argc > 2) piece = strtoul(argv[2], NULL, 10);
  src = mmap(NULL, kArena, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  dst = mmap(NULL, kArena, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (src == MAP_FAILED || dst == MAP_FAILED) die("mmap");
  for (size_t i = 0; i < kArena; i++) src[i] = (char)(i * 7 + (i >> 12));
  memset(dst, 0, kArena);

  struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof at;
  listener = socket(AF_INET, SOCK_STREAM, 0);
  if (bind(listener, (struct sockaddr*)&at, sizeof at) || listen(listener, 1) || getsockname(listener, (struct sockaddr*)&at, &len))
    die("listen");
  pthread_t receiver;
  pthread_create(&receiver, NULL, Receive, NULL);
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1, buf = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  if (connect(fd, (struct sockaddr*)&at, sizeof at)) die("connect");
  int pipefd[2];
  if (pipe(pipefd) || fcntl(pipefd[1], F_SETPIPE_SZ, 1 << 20) < 0) die("pipe");

  double cpu0 = CpuSeconds(), t0 = Seconds();
  for (size_t sent = 0; sent < kTotal; sent += piece) {
    char* p = src + sent % kArena;
    for (size_t left = piece; left > 0;) {
      if (!spliced) {
        ssize_t w = send(fd, p, left, MSG_NOSIGNAL);
        if (w < 0) die("send");
        p += w;
        left -= (size_t)w;
        continue;
      }
      struct iovec v = {p, left < (1u << 20) ? left : (1u << 20)};
      ssize_t w = vmsplice(pipefd[1], &v, 1, 0);
      if (w < 0) die("vmsplice");
      for (ssize_t moved = 0; moved < w;) {
        ssize_t k = splice(pipefd[0], NULL, fd, NULL, (size_t)(w - moved), SPLICE_F_MOVE | SPLICE_F_MORE);
        if (k < 0) die("splice");
        moved += k;
      }
      p += w;
      left -= (size_t)w;
    }
  }
  pthread_join(receiver, NULL);
  double seconds = Seconds() - t0, gib = kTotal / 1073741824.0;
  printf("%-6s piece %zu: %.2f GiB/s, %.3f CPU s/GiB%s\n", spliced ? "splice" : "send", piece, gib / seconds,
         (CpuSeconds() - cpu0) / gib, memcmp(src, dst, kArena) ? " BYTES DIFFER" : "");
  return 0;
}
