import { createServer } from "node:net";

/**
 * A loopback port nothing listens on right now, for a throwaway server the test setup starts
 * (PostgreSQL, Redis, RabbitMQ, Prometheus, a CLI process). Another process may take it before the
 * server binds, so starters retry on a bind failure.
 */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}
