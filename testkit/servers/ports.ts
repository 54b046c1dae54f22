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

/**
 * Runs `start` on a free port, again on another one when it fails (someone took the port between
 * freePort() and the bind), up to `attempts` times; resolves with the port it started on, or
 * rejects with the last failure.
 */
export async function startOnFreePort(start: (port: number) => Promise<void>, attempts = 5): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    try {
      await start(port);
      return port;
    } catch (error) {
      if (attempt >= attempts) throw error;
    }
  }
}
