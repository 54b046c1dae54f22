/**
 * `conveyor worker` starting while its store is down: it waits for the store (an orchestrator
 * restarting it would only crash-loop through the outage) and a stop request meanwhile exits 0.
 * The store is PostgreSQL behind a TCP relay this test opens and closes.
 */
import { createServer, connect, type Server, type Socket } from "node:net";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { PostgresBackend } from "../../src/backend/postgres/index.js";
import { Queue, silentLogger, StoreUnavailableError } from "../../src/index.js";
import { isStoreUnreachable } from "../../src/cli/worker.js";
import { spawnCli, type Spawned } from "../helpers/cli.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { waitFor } from "../helpers/wait-for.js";
import { freePort } from "../helpers/ports.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);
const children: Spawned[] = [];
const servers: Server[] = [];
/** Every connection a relay carries, so a test can drop them all (what a store crash looks like to its clients). */
const relayed = new Set<Socket>();

afterEach(() => {
  for (const c of children.splice(0)) if (c.child.exitCode === null) c.child.kill("SIGKILL");
  for (const s of servers.splice(0)) s.close();
  dropRelayed();
});

function dropRelayed(): void {
  for (const socket of relayed) socket.destroy();
  relayed.clear();
}
afterAll(() => schemas.dropAll());

/** Starts relaying `port` to the test server. */
async function relay(port: number): Promise<void> {
  const target = new URL(url);
  const server = createServer((client: Socket) => {
    const upstream = connect(Number(target.port), target.hostname);
    relayed.add(client).add(upstream);
    client.pipe(upstream).pipe(client);
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
}

function startWorker(port: number, schema: string): Spawned {
  const through = new URL(url);
  through.port = String(port);
  through.searchParams.set("schema", schema);
  const s = spawnCli(["worker", "--db", through.toString(), "--queue", "q", "--handlers", "test/fixtures/handlers.ts", "--poll-interval-ms", "100"]);
  children.push(s);
  return s;
}

describe("conveyor worker while the store is down", () => {
  it("waits for the store instead of exiting, then runs jobs once it is up", async () => {
    const port = await freePort();
    const schema = schemas.create();
    const w = startWorker(port, schema);
    await waitFor(() => /the store is unreachable; retrying/.test(w.stderr()), { timeoutMs: 20_000, description: "the worker reports the outage" });
    expect(w.child.exitCode).toBeNull();

    await relay(port);
    const backend = new PostgresBackend({ connectionString: url, schema, logger: silentLogger });
    try {
      await backend.migrate();
      const { id } = await new Queue("q", { backend }).add("sleep", { ms: 1 });
      await waitFor(async () => (await backend.get(id))?.state === "completed", { timeoutMs: 30_000, description: "the job ran once the store came up" });
    } finally {
      await backend.close();
    }
    w.child.kill("SIGTERM");
    expect(await w.exited).toBe(0);
  }, 60_000);

  it("survives a store outage while running: keeps its process, then runs jobs again once the store is back", async () => {
    const port = await freePort();
    const schema = schemas.create();
    await relay(port);
    const backend = new PostgresBackend({ connectionString: url, schema, logger: silentLogger });
    try {
      await backend.migrate();
      const queue = new Queue("q", { backend });
      const w = startWorker(port, schema);
      const before = await queue.add("sleep", { ms: 1 });
      await waitFor(async () => (await backend.get(before.id))?.state === "completed", { timeoutMs: 30_000, description: "a job ran before the outage" });

      // The store goes away: the relay stops listening and every open connection is cut.
      for (const server of servers.splice(0)) server.close();
      dropRelayed();
      await waitFor(() => /unreachable or busy/.test(w.stderr()), { timeoutMs: 20_000, description: "the worker reports the store as unavailable" });
      expect(w.child.exitCode).toBeNull();
      // Added once the worker has seen the outage, not before: a claim whose bytes reached the
      // server just before the cut still runs there, and one that ran after this add would take
      // the job (the at-least-once lost claim, rescued only when its lease runs out).
      const during = await queue.add("sleep", { ms: 1 });
      expect((await backend.get(during.id))?.state).toBe("waiting");

      await relay(port);
      await waitFor(async () => (await backend.get(during.id))?.state === "completed", {
        timeoutMs: 30_000,
        description: "the worker resumed once the store was back",
      });
      w.child.kill("SIGTERM");
      expect(await w.exited).toBe(0);
    } finally {
      await backend.close();
    }
  }, 90_000);

  it("exits 0 at once on SIGTERM while still waiting for the store", async () => {
    const w = startWorker(await freePort(), schemas.create());
    await waitFor(() => /the store is unreachable; retrying/.test(w.stderr()), { timeoutMs: 20_000 });
    w.child.kill("SIGTERM");
    expect(await w.exited).toBe(0);
    expect(w.stderr()).toMatch(/stopped before the worker started; nothing was claimed/);
  }, 30_000);

  it("a usage mistake fails at once (exit 2), even while the store is down", async () => {
    const through = new URL(url);
    through.port = String(await freePort());
    const w = spawnCli(["worker", "--db", through.toString(), "--queue", "q", "--handlers", "test/fixtures/handlers.ts", "--prefetch", "-1"]);
    children.push(w);
    expect(await w.exited).toBe(2);
    expect(w.stderr()).toMatch(/--prefetch/);
    expect(w.stderr()).not.toMatch(/unreachable/);
  }, 30_000);

  it("tells an outage from a mistake: only the first is waited for", async () => {
    // The backends type outages at their driver boundary; the CLI only reads the type.
    const down = new PostgresBackend({ connectionString: `postgres://x@127.0.0.1:${await freePort()}/x`, logger: silentLogger });
    const outage: unknown = await down.migrate().catch((e: unknown) => e);
    await down.close();
    expect(outage).toBeInstanceOf(StoreUnavailableError);
    expect(isStoreUnreachable(outage)).toBe(true);
    expect(isStoreUnreachable(new Error("wrapped", { cause: outage }))).toBe(true);
    expect(isStoreUnreachable(Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" }))).toBe(false);
    expect(isStoreUnreachable(Object.assign(new Error('password authentication failed for user "x"'), { code: "28P01" }))).toBe(false);
    expect(isStoreUnreachable(new Error("the schema is newer than this code"))).toBe(false);
  });
});
