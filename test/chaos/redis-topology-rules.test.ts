/**
 * The failover harness' own rules (testkit/servers/redis-topology.ts), on their own: when a
 * replica counts as in sync (shared by the Sentinel and the Cluster harness), and that a look at
 * a node that accepts the connection and never answers ends instead of holding the harness.
 */
import { createServer, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { once, replicaInSync } from "../../testkit/servers/redis-topology.js";

const primary = (offset: number) => `# Replication\r\nrole:master\r\nconnected_slaves:1\r\nmaster_repl_offset:${offset}\r\n`;
const replica = (fields: { link?: string; syncing?: number; offset?: number | null }) =>
  [
    "# Replication",
    "role:slave",
    "master_host:127.0.0.1",
    "master_port:6379",
    `master_link_status:${fields.link ?? "up"}`,
    `master_sync_in_progress:${fields.syncing ?? 0}`,
    ...(fields.offset === null ? [] : [`slave_repl_offset:${fields.offset ?? 0}`]),
    "",
  ].join("\r\n");

describe("failover harness rules", () => {
  it("counts a replica in sync only once its offset reached the primary's, read before it", () => {
    // Link up right after a full resync, the writes made during the transfer still streaming: not in sync.
    expect(replicaInSync(primary(52_000), replica({ offset: 48_000 })).inSync).toBe(false);
    expect(replicaInSync(primary(52_000), replica({ offset: 52_000 })).inSync).toBe(true);
    expect(replicaInSync(primary(52_000), replica({ offset: 53_100 })).inSync).toBe(true);
    expect(replicaInSync(primary(52_000), replica({ link: "down", offset: 52_000 })).inSync).toBe(false);
    expect(replicaInSync(primary(52_000), replica({ syncing: 1, offset: 52_000 })).inSync).toBe(false);
    expect(replicaInSync(primary(52_000), replica({ offset: null })).inSync).toBe(false);
    expect(replicaInSync(primary(52_000), replica({ offset: 48_000 })).summary).toContain("replica offset 48000 of the primary's 52000");
  });

  describe("a node that accepts a connection and never answers", () => {
    let server: Server;
    const sockets: Socket[] = [];
    beforeAll(async () => {
      server = createServer((socket) => void sockets.push(socket));
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    });
    afterAll(async () => {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    });

    it("ends the look with an error naming the port, instead of waiting forever", async () => {
      const port = (server.address() as { port: number }).port;
      await expect(once(port, (r) => r.info("replication"), 300)).rejects.toThrow(`:${port} did not answer within 300 ms`);
      expect(sockets.length).toBeGreaterThan(0);
    });
  });
});
