/*
 * LD_PRELOAD shim for the Kafka fault tests (test/helpers/kafka.ts): librdkafka's mock cluster
 * binds each mock broker to 127.0.0.1 port 0, so a restarted cluster would come back on new ports
 * and no client could find it again, unlike a restarted Kafka broker. With
 * CONVEYOR_KAFKA_MOCK_PORTS="p1,p2,p3" set, the n-th bind to an IPv4 port 0 takes the n-th port
 * of the list instead (with SO_REUSEADDR, so a restart is not refused over TIME_WAIT sockets).
 * Every other bind is untouched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
static int taken = 0;
int bind(int fd, const struct sockaddr *addr, socklen_t len) {
  static int (*real_bind)(int, const struct sockaddr *, socklen_t);
  if (!real_bind) real_bind = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
  const char *ports = getenv("CONVEYOR_KAFKA_MOCK_PORTS");
  if (ports && addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in) &&
      ((const struct sockaddr_in *)addr)->sin_port == 0) {
    const char *p = ports;
    for (int i = 0; i < taken && p; i++) { p = strchr(p, ','); if (p) p++; }
    if (p && *p) {
      taken++;
      struct sockaddr_in fixed;
      memcpy(&fixed, addr, sizeof fixed);
      fixed.sin_port = htons((unsigned short)atoi(p));
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      return real_bind(fd, (const struct sockaddr *)&fixed, sizeof fixed);
    }
  }
  return real_bind(fd, addr, len);
}
