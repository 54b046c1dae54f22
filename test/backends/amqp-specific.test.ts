/**
 * The RabbitMQ backend on the shared throwaway broker: the Worker runs on it unchanged, retries go
 * through delay queues, dead letters keep their forensics (in the body and as headers, read here
 * with plain amqplib), replay, fencing of settles by channel, capability refusals, and the CLI.
 */
import { connect, type ChannelModel } from "amqplib";
import { afterAll, afterEach, describe, expect, inject, it } from "vitest";
import { AmqpBackend, type AmqpBackendOptions } from "../../src/backend/amqp/index.js";
import { openBackend } from "../../src/backend/open.js";
import type { Backend, ClaimedJob } from "../../src/backend/contract.js";
import { InvalidInputError, UnrecoverableError, UnsupportedByStoreError } from "../../src/core/errors.js";
import { silentLogger } from "../../src/core/logger.js";
import { buildJobSpec, type JobOptions } from "../../src/core/spec.js";
import { Worker } from "../../src/runtime/worker.js";
import { createServer } from "../../src/http/index.js";
import { deleteBackendQueues, rabbitName, requireRabbit } from "../helpers/rabbitmq.js";
import { runCli, spawnCli } from "../helpers/cli.js";
import { waitFor } from "../helpers/wait-for.js";

const url = requireRabbit(inject("rabbitmqUrl"), inject("rabbitmqUnavailable"));

const open: Array<{ close(): Promise<unknown> }> = [];
afterEach(async () => {
  for (const thing of open.splice(0).reverse()) {
    await thing.close();
    if (thing instanceof AmqpBackend) await deleteBackendQueues(url, thing);
  }
});

/** A backend under a prefix of its own, closed after the test. */
function backend(options: Partial<AmqpBackendOptions> = {}): AmqpBackend {
  const b = new AmqpBackend({ url, prefix: rabbitName("p"), logger: silentLogger, ...options });
  open.push(b);
  return b;
}

let raw: ChannelModel | undefined;
async function rawChannel() {
  raw ??= await connect(url);
  return raw.createChannel();
}
afterAll(async () => {
  await raw?.close();
});

const A = { id: "worker-A", host: "host-A", pid: 4242 };

/**
 * Resolves once the acks `b` sent on its consuming channel reached the queue: a quorum queue
 * applies them asynchronously, and a close right after them can race them. A basic.get on the
 * same channel and queue is a synchronous command to the same queue leader, answered after them
 * (nothing is ready to take: every message was delivered).
 */
async function ackBarrier(b: AmqpBackend, queue: string): Promise<void> {
  const internals = b as unknown as { current: { consumer: { get(q: string, o: { noAck: boolean }): Promise<unknown> } }; names: { prefix: string } };
  expect(await internals.current.consumer.get(`${internals.names.prefix}~${queue}`, { noAck: false })).toBe(false);
}

function spec(queue: string, options: JobOptions & { name?: string; data?: unknown } = {}) {
  const { name = "job", data = {}, ...rest } = options;
  return buildJobSpec({ queue, name, data, options: rest });
}

async function enqueueOne(b: Backend, job: ReturnType<typeof spec>): Promise<string> {
  const [result] = await b.enqueue([job]);
  return result!.id;
}

async function claimSoon(b: Backend, queue: string, limit = 1, names = ["job"]): Promise<ClaimedJob[]> {
  return waitFor(
    async () => {
      const got = await b.claim({ queues: [queue], names, worker: A, limit, leaseMs: 30_000 });
      if (got.length === 0) return null;
      // Give the rest of a batch a moment to arrive, then take it too.
      return got;
    },
    { timeoutMs: 10_000, description: `a job on ${queue}` },
  );
}

function worker(
  b: Backend,
  queue: string,
  handlers: ConstructorParameters<typeof Worker>[0]["handlers"],
  extra: Partial<ConstructorParameters<typeof Worker>[0]> = {},
): Worker {
  const w = new Worker({ backend: b, queues: queue, handlers, logger: silentLogger, maintenance: false, pollIntervalMs: 200, ...extra });
  open.push(w);
  return w;
}

describe("AmqpBackend with the Worker", () => {
  it("runs every job exactly once at concurrency 8, pushed by the broker", async () => {
    const b = backend();
    const seen = new Map<number, number>();
    const w = worker(
      b,
      "work",
      { job: async (job) => void seen.set((job.data as { i: number }).i, (seen.get((job.data as { i: number }).i) ?? 0) + 1) },
      { concurrency: 8 },
    );
    await b.enqueue(Array.from({ length: 200 }, (_, i) => spec("work", { data: { i } })));
    await waitFor(() => seen.size === 200, { timeoutMs: 20_000 });
    await w.close();
    expect([...seen.values()].every((n) => n === 1)).toBe(true);
    expect((await b.stats("work"))[0]!.counts).toMatchObject({ waiting: 0, scheduled: 0, dead: 0 });
  });

  it("retries with backoff through a delay queue, then completes; the attempt number grows", async () => {
    const b = backend();
    const attempts: number[] = [];
    const w = worker(b, "retry", {
      job: async (job) => {
        attempts.push(job.attempt);
        if (job.attempt < 3) throw new Error(`boom ${job.attempt}`);
        return "ok";
      },
    });
    const done = new Promise((resolve) => w.on("job:completed", resolve));
    await b.enqueue([spec("retry", { attempts: 5, backoff: { type: "fixed", delayMs: 200 } })]);
    await done;
    expect(attempts).toEqual([1, 2, 3]);
  });

  it("dead letters keep the forensics: error, stack, attempts, host, timings (body and headers); replay runs the job again", async () => {
    const b = backend();
    let fail = true;
    const runs: number[] = [];
    const w = worker(b, "dlq", {
      job: async (job) => {
        runs.push(job.attempt);
        if (fail) throw new Error(`card declined on attempt ${job.attempt}`);
        return "charged";
      },
    });
    const dead = new Promise((resolve) => w.on("job:dead", resolve));
    const id = await enqueueOne(b, spec("dlq", { attempts: 2, backoff: { type: "fixed", delayMs: 10 }, data: { order: 7 } }));
    await dead;
    expect(runs).toEqual([1, 2]);

    const job = await b.get(id, "dlq");
    expect(job).toMatchObject({ id, state: "dead", attempt: 2, data: { order: 7 }, error: { name: "Error", message: "card declined on attempt 2" } });
    expect(job!.error!.stack).toContain("card declined on attempt 2");
    expect(job!.history.map((h) => [h.attempt, h.outcome, h.host, h.pid])).toEqual([
      [1, "failed", w.identity.host, process.pid],
      [2, "dead", w.identity.host, process.pid],
    ]);
    expect(job!.finishedAt).toBeGreaterThanOrEqual(job!.history[1]!.startedAt);
    expect((await b.list({ queue: "dlq", state: "dead" })).map((j) => j.id)).toEqual([id]);

    // The same forensics as headers, for RabbitMQ's own tools.
    const channel = await rawChannel();
    const prefix = (b as unknown as { names: { dead(q: string): string } }).names.dead("dlq");
    const message = await channel.get(prefix, { noAck: false });
    if (message === false) throw new Error("the dead queue is empty");
    expect(message.properties.headers).toMatchObject({
      "x-conveyor-error-name": "Error",
      "x-conveyor-error-message": "card declined on attempt 2",
      "x-conveyor-attempts": 2,
      "x-conveyor-host": w.identity.host,
      "x-conveyor-worker": w.id,
    });
    expect(message.properties.headers!["x-conveyor-error-stack"]).toContain("card declined");
    expect(typeof message.properties.headers!["x-conveyor-started-at"]).toBe("number");
    await channel.close(); // hands the message back

    fail = false;
    const completed = new Promise((resolve) => w.on("job:completed", resolve));
    expect(await b.replay(id, "dlq")).toBe("replayed");
    await completed;
    expect(runs).toEqual([1, 2, 1]);
    expect(await b.list({ queue: "dlq", state: "dead" })).toEqual([]);
    expect(await b.replay(id, "dlq")).toBe("not-found");
  });

  it(
    "replayAllDead: one pass in confirmed bursts, every replayed letter gone from the dead queue; a name filter, a limit; letters dying again meanwhile are not replayed twice",
    { timeout: 300_000 },
    async () => {
      const prefix = rabbitName("all");
      const b = backend({ prefix });
      const names = (n: number, name: string) => Array.from({ length: n }, (_, i) => spec("all", { name, data: { i } }));
      const doomed = await b.enqueue([...names(600, "a"), ...names(30, "b")]);
      const dying = () =>
        worker(
          b,
          "all",
          {
            a: async () => {
              throw new UnrecoverableError("a");
            },
            b: async () => {
              throw new UnrecoverableError("b");
            },
          },
          { concurrency: 20 },
        );
      const counts = async () => {
        const { dead, waiting } = (await b.stats("all"))[0]!.counts;
        return { dead, waiting };
      };
      const first = dying();
      await waitFor(async () => (await counts()).dead === 630, { timeoutMs: 90_000 });
      await first.close();

      // No worker: what the passes replayed is waiting, and gone from the dead queue (a quorum
      // queue lost the last burst's acks to the channel's close before the settle barrier).
      const onlyB = await b.replayAllDead("all", { name: "b" });
      expect(onlyB.replayed.sort()).toEqual(
        doomed
          .slice(600)
          .map((r) => r.id)
          .sort(),
      );
      expect(await counts()).toEqual({ dead: 600, waiting: 30 });
      expect((await b.replayAllDead("all", { limit: 7 })).replayed).toHaveLength(7);
      expect(await counts()).toEqual({ dead: 593, waiting: 37 });
      const rest = await b.replayAllDead("all");
      expect(rest.replayed).toHaveLength(593);
      expect(await counts()).toEqual({ dead: 0, waiting: 630 });

      // With a worker killing every replay at once: each letter replayed once in a pass although
      // its replay dies again (to the dead queue's tail) while the pass is still reading.
      dying();
      await waitFor(async () => (await counts()).dead === 630, { timeoutMs: 90_000 });
      const all = await b.replayAllDead("all");
      expect(all.replayed).toHaveLength(630);
      expect(new Set(all.replayed).size).toBe(630);
      await waitFor(async () => (await counts()).dead === 630, { timeoutMs: 90_000 });
      // The CLI's --all goes through the same pass.
      const cli = await runCli(["dlq", "replay", "--all", "--db", `${url}?prefix=${prefix}`, "--queue", "all"]);
      expect(cli.code, cli.stderr).toBe(0);
      expect(cli.stdout).toContain("replayed 630 dead job(s)");
    },
  );

  it("an UnrecoverableError goes to the dead queue at once, attempts left or not", async () => {
    const b = backend();
    const w = worker(b, "unrec", {
      job: async () => {
        throw new UnrecoverableError("no such user");
      },
    });
    const dead = new Promise((resolve) => w.on("job:dead", resolve));
    const id = await enqueueOne(b, spec("unrec", { attempts: 5 }));
    await dead;
    expect(await b.get(id, "unrec")).toMatchObject({ state: "dead", attempt: 1, error: { name: "UnrecoverableError" } });
  });

  it("a delayed job waits in a delay queue for at least its delay", async () => {
    const b = backend();
    const started: number[] = [];
    worker(b, "later", { job: async () => void started.push(Date.now()) });
    const at = Date.now();
    await b.enqueue([spec("later", { delayMs: 700 })]);
    await waitFor(() => started.length === 1, { timeoutMs: 10_000 });
    expect(started[0]! - at).toBeGreaterThanOrEqual(700);
    expect((await b.stats("later"))[0]!.counts.scheduled).toBe(0);
  });

  it("a job no worker here handles is never dropped: it comes back later, and runs once a worker knows it", async () => {
    const b = backend({ unhandledRetryMs: 100 });
    const w1 = worker(b, "names", { other: async () => undefined });
    await b.enqueue([spec("names", { name: "job" })]);
    await waitFor(async () => (await b.stats("names"))[0]!.counts.scheduled + (await b.stats("names"))[0]!.counts.waiting === 1, { timeoutMs: 5_000 });
    await w1.close();
    const ran = await new Promise((resolve) => worker(b, "names", { job: async () => resolve("ran") }));
    expect(ran).toBe("ran");
  });

  it("graceful shutdown: a job past the grace period is handed back (nack-requeue) and runs on another worker", async () => {
    const b = backend();
    const w = worker(b, "grace", {
      job: (_job, ctx) => new Promise((_resolve, reject) => ctx.signal.addEventListener("abort", () => reject(new Error("aborted")))),
    });
    const started = new Promise((resolve) => w.on("job:started", resolve));
    await b.enqueue([spec("grace")]);
    await started;
    const result = await w.close({ graceMs: 50 });
    expect(result.drained).toBe(false);
    expect(result.releasedJobIds).toHaveLength(1);
    const other = backend({ prefix: (b as unknown as { names: { prefix: string } }).names.prefix });
    const ran = await new Promise((resolve) => worker(other, "grace", { job: async (job) => resolve(job.attempt) }));
    expect(ran).toBe(1);
  });
});

describe("AmqpBackend settles", () => {
  it("fencing: after the channel dies, the old lease is stale and no ack reaches the new channel", async () => {
    const b = backend();
    await b.enqueue([spec("fence", { data: { n: 1 } })]);
    const [first] = await claimSoon(b, "fence");
    const generation = b.state.generation;
    // Kill the session as the broker would (server-side close), from the inside.
    const session = (b as unknown as { current: { connection: ChannelModel } }).current;
    await session.connection.close();
    // The broker requeued the delivery; a new session gets it again, with delivery tag 1 on a new
    // channel, the same tag the first delivery had on the old one.
    const [second] = await claimSoon(b, "fence");
    expect(b.state.generation).toBeGreaterThan(generation!);
    expect(second!.lease.token).not.toBe(first!.lease.token);
    expect(await b.complete([{ lease: first!.lease, result: null }])).toEqual(["stale"]);
    expect(await b.fail([{ lease: first!.lease, error: { name: "E", message: "late", stack: null }, retryDelayMs: 0 }])).toEqual(["stale"]);
    expect(await b.release([first!.lease])).toEqual(["stale"]);
    expect((await b.heartbeat([first!.lease, second!.lease], 30_000)).lost).toEqual([{ lease: first!.lease, reason: "expired" }]);
    // Had the stale ack gone out on the new channel it would have acknowledged the second delivery.
    expect(await b.complete([{ lease: second!.lease, result: null }])).toEqual(["applied"]);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect((await b.stats("fence"))[0]!.counts).toMatchObject({ waiting: 0, active: 0, dead: 0 });
    expect(await b.complete([{ lease: second!.lease, result: null }])).toEqual(["stale"]);
  });

  it("a batch of completions is acknowledged together only as far as it reaches: jobs completed out of order never ack the ones before them", async () => {
    const b = backend({ claimWaitMs: 2_000, prefetch: 10 });
    await b.enqueue([1, 2, 3, 4, 5].map((n) => spec("acks", { data: { n } })));
    const claimed = await waitFor(
      async () => {
        const got = await b.claim({ queues: ["acks"], names: ["job"], worker: A, limit: 5, leaseMs: 30_000 });
        return got.length === 5 ? got : null;
      },
      { timeoutMs: 10_000, description: "five deliveries in one claim" },
    );
    const [first, second, third, fourth, fifth] = claimed as [ClaimedJob, ClaimedJob, ClaimedJob, ClaimedJob, ClaimedJob];
    // The later ones first (their deliveries came last): one each, the earlier two still unsettled.
    expect(await b.complete([fifth, fourth].map((c) => ({ lease: c.lease, result: null })))).toEqual(["applied", "applied"]);
    // The first and third: the second lies between them, so no ack may cover it.
    expect(await b.complete([third, first].map((c) => ({ lease: c.lease, result: null })))).toEqual(["applied", "applied"]);
    // The session ends with the second unsettled: the broker must hand back exactly that one.
    await ackBarrier(b, "acks");
    await b.close();
    const again = backend({ prefix: (b as unknown as { names: { prefix: string } }).names.prefix, claimWaitMs: 2_000 });
    const back = await claimSoon(again, "acks", 5);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const rest = await again.claim({ queues: ["acks"], names: ["job"], worker: A, limit: 5, leaseMs: 30_000 });
    expect([...back, ...rest].map((c) => c.job.id)).toEqual([second.job.id]);
  });

  it("a batch of completions covering every delivery up to its highest settles them all (one multiple ack): none comes back", async () => {
    const b = backend({ claimWaitMs: 2_000, prefetch: 10 });
    await b.enqueue([1, 2, 3, 4].map((n) => spec("acks-all", { data: { n } })));
    const claimed = await waitFor(
      async () => {
        const got = await b.claim({ queues: ["acks-all"], names: ["job"], worker: A, limit: 4, leaseMs: 30_000 });
        return got.length === 4 ? got : null;
      },
      { timeoutMs: 10_000, description: "four deliveries in one claim" },
    );
    const session = (b as unknown as { current: { unsettled: Set<number> } }).current;
    expect(session.unsettled.size).toBe(4);
    expect(await b.complete(claimed.reverse().map((c) => ({ lease: c.lease, result: null })))).toEqual(["applied", "applied", "applied", "applied"]);
    expect(session.unsettled.size).toBe(0);
    await ackBarrier(b, "acks-all");
    await b.close();
    const again = backend({ prefix: (b as unknown as { names: { prefix: string } }).names.prefix, claimWaitMs: 1_000 });
    expect(await again.claim({ queues: ["acks-all"], names: ["job"], worker: A, limit: 4, leaseMs: 30_000 })).toEqual([]);
  });

  it("a failed attempt's retry copy is confirmed before the original is acked: nothing lost when the ack cannot be sent", async () => {
    const b = backend();
    await b.enqueue([spec("order", { data: { n: 1 } })]);
    const [claimed] = await claimSoon(b, "order");
    // The consumer channel dies while the failure is on its way: the retry copy is published on
    // the publisher channel (confirmed), the ack finds its channel dead and the settle is stale.
    const session = (b as unknown as { current: { consumer: { close(): Promise<void> } } }).current;
    const failing = b.fail([{ lease: claimed!.lease, error: { name: "E", message: "x", stack: null }, retryDelayMs: 0 }]);
    await session.consumer.close();
    await failing.catch(() => undefined);
    // Whatever happened, the job exists: as the retry copy, the requeued original, or both.
    const seen = await claimSoon(b, "order", 10);
    expect(seen.length).toBeGreaterThanOrEqual(1);
    expect(seen.every((c) => c.job.id === claimed!.job.id)).toBe(true);
  });

  it("a job held close to consumer_timeout is handed back alone and its lease reported lost; the channel and its other jobs live on", async () => {
    // consumerTimeoutMs 2 s: the guard hands a delivery back after 2 s minus a tenth.
    const b = backend({ consumerTimeoutMs: 2_000, claimWaitMs: 500, prefetch: 10 });
    await b.enqueue([spec("long", { data: { n: 1 } })]);
    const [long] = await claimSoon(b, "long");
    expect((await b.heartbeat([long!.lease], 30_000)).lost).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 1_900));
    // (The broker's clock runs from delivery: this second job is delivered now, on the same channel.)
    await b.enqueue([spec("long", { data: { n: 2 } })]);
    const [short] = await claimSoon(b, "long");
    const generation = b.state.generation;
    expect((await b.heartbeat([long!.lease, short!.lease], 30_000)).lost).toEqual([{ lease: long!.lease, reason: "expired" }]);
    expect(await b.complete([{ lease: long!.lease, result: null }])).toEqual(["stale"]);
    // The other job, on the same channel, is still ours; the long one comes back to run again.
    expect(await b.complete([{ lease: short!.lease, result: null }])).toEqual(["applied"]);
    const [again] = await claimSoon(b, "long");
    expect(again!.job.id).toBe(long!.job.id);
    expect(again!.job.stalls).toBe(1);
    expect(b.state.generation).toBe(generation);
  });

  it("poison pill: a message handed back x-delivery-limit times is dead-lettered by the broker, with the reason", async () => {
    const b = backend({ deliveryLimit: 2 });
    const id = await enqueueOne(b, spec("poison"));
    for (let i = 0; i < 3; i++) {
      const [c] = await claimSoon(b, "poison");
      expect(c!.job.stalls).toBe(i);
      expect(await b.release([c!.lease])).toEqual(["applied"]);
    }
    const dead = await waitFor(() => b.list({ queue: "poison", state: "dead" }).then((l) => l[0]), { timeoutMs: 5_000 });
    expect(dead).toMatchObject({ id, state: "dead", error: { name: "LeaseExpiredError" } });
    expect(dead.error!.message).toContain("x-delivery-limit");
  });

  it("?deliveryLimit=N in the URL sets x-delivery-limit (the CLI's way to it); nonsense is refused", async () => {
    const b = (await openBackend(`${url}?prefix=${rabbitName("limit")}&deliveryLimit=1`)) as AmqpBackend;
    open.push(b);
    const id = await enqueueOne(b, spec("poison"));
    for (let i = 0; i < 2; i++) {
      const [c] = await claimSoon(b, "poison");
      expect(await b.release([c!.lease])).toEqual(["applied"]);
    }
    const dead = await waitFor(() => b.list({ queue: "poison", state: "dead" }).then((l) => l[0]), { timeoutMs: 5_000 });
    expect(dead).toMatchObject({ id, state: "dead" });
    await expect(openBackend(`${url}?deliveryLimit=0`)).rejects.toThrow(/deliveryLimit/);
    await expect(openBackend(`${url}?deliveryLimit=many`)).rejects.toThrow(InvalidInputError);
  });
});

describe("AmqpBackend capabilities", () => {
  it("declares what RabbitMQ cannot do, and refuses those calls with a clear error", async () => {
    const b = backend();
    expect(b.capabilities).toMatchObject({
      jobRecords: false,
      cancel: false,
      priorities: false,
      uniqueIds: false,
      pause: false,
      clockDriven: false,
      idempotencyKeys: false,
      claimAcrossQueues: "turns",
    });
    const id = await enqueueOne(b, spec("caps"));
    await expect(b.get(id, "caps")).rejects.toThrow(UnsupportedByStoreError);
    await expect(b.get(id, "caps")).rejects.toThrow(/only dead letters can be looked up/);
    await expect(b.list({ queue: "caps", state: "waiting" })).rejects.toThrow(UnsupportedByStoreError);
    await expect(b.cancel(id, "caps")).rejects.toThrow(UnsupportedByStoreError);
    await expect(b.pause("caps")).rejects.toThrow(UnsupportedByStoreError);
    await expect(b.idempotency.once("k", 1_000)).rejects.toThrow(/idempotency/);
    await expect(b.enqueue([spec("caps", { priority: 1 })])).rejects.toThrow(InvalidInputError);
    await expect(b.enqueue([spec("caps")], { tx: {} })).rejects.toThrow(InvalidInputError);
  });

  it("an idempotency store from another backend makes ctx.once work", async () => {
    const keys = new Set<string>();
    const b = backend({ idempotency: { once: async (key: string) => (keys.has(key) ? false : (keys.add(key), true)) } });
    expect(b.capabilities.idempotencyKeys).toBe(true);
    expect(await b.idempotency.once("a", 1)).toBe(true);
    expect(await b.idempotency.once("a", 1)).toBe(false);
  });

  it("openBackend opens amqp:// URLs with ?prefix and ?queues", async () => {
    const prefix = rabbitName("open");
    const b = await openBackend(`${url}?prefix=${prefix}&queues=one,two`);
    open.push(b);
    expect(b).toBeInstanceOf(AmqpBackend);
    expect((await b.stats()).map((s) => s.queue).sort()).toEqual(["one", "two"]);
  });

  it("the CLI: worker-less enqueue, dlq ls and dlq replay on --db amqp://", async () => {
    const prefix = rabbitName("cli");
    const b = backend({ prefix });
    worker(b, "cli", {
      job: async () => {
        throw new UnrecoverableError("bad");
      },
    });
    const id = await enqueueOne(b, spec("cli"));
    await waitFor(async () => (await b.list({ queue: "cli", state: "dead" })).length === 1, { timeoutMs: 10_000 });
    const db = `${url}?prefix=${prefix}`;
    const ls = await runCli(["dlq", "ls", "--db", db, "--queue", "cli", "--json"]);
    expect(ls.code, ls.stderr).toBe(0);
    expect((JSON.parse(ls.stdout) as Array<{ id: string }>).map((j) => j.id)).toEqual([id]);
    const show = await runCli(["jobs", "show", id, "--db", db, "--queue", "cli"]);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toContain("dead");
    // A job that is not a dead letter cannot be looked up: a clear refusal, not a crash.
    const waiting = await enqueueOne(b, spec("cli-idle"));
    const status = await runCli(["jobs", "show", waiting, "--db", db, "--queue", "cli-idle"]);
    expect(status.code).not.toBe(0);
    expect(status.stderr).toMatch(/only dead letters can be looked up/);
    const replay = await runCli(["dlq", "replay", id, "--db", db, "--queue", "cli"]);
    expect(replay.code, replay.stderr).toBe(0);
    expect(replay.stdout).toContain("replayed");
  });

  it("conveyor worker --db amqp://… runs the jobs; SIGTERM stops it with exit 0 (drained) or 1 (a job handed back)", { timeout: 60_000 }, async () => {
    const prefix = rabbitName("cliw");
    const b = backend({ prefix });
    await b.enqueue(Array.from({ length: 5 }, (_, i) => spec("cliw", { name: "sleep", data: { ms: 10, i } })));
    const db = `${url}?prefix=${prefix}`;
    const args = [
      "worker",
      "--db",
      db,
      "--queue",
      "cliw",
      "--handlers",
      "test/fixtures/handlers.ts",
      "--poll-interval-ms",
      "200",
      "--shutdown-grace-ms",
      "300",
      "--verbose",
    ];
    const first = spawnCli(args);
    await waitFor(() => (first.stderr().match(/"msg":"completed"/g) ?? []).length >= 5, {
      timeoutMs: 30_000,
      description: "5 jobs completed by the CLI worker",
    });
    first.child.kill("SIGTERM");
    expect(await first.exited).toBe(0);
    // A job that outlives the grace period is handed back: exit 1, and the job is in its queue again.
    await b.enqueue([spec("cliw", { name: "stubborn", data: { ms: 20_000 } })]);
    const second = spawnCli(args);
    // Delivered to the worker (no longer ready in its queue): it is running.
    await waitFor(() => /worker started/.test(second.stderr()), { timeoutMs: 30_000, description: "the worker up" });
    await waitFor(async () => (await b.stats("cliw"))[0]!.counts.waiting === 0, { timeoutMs: 30_000, description: "the stubborn job taken" });
    second.child.kill("SIGTERM");
    expect(await second.exited).toBe(1);
    await waitFor(async () => (await b.stats("cliw"))[0]!.counts.waiting === 1, { timeoutMs: 10_000, description: "the handed-back job waiting again" });
  });

  it("HTTP: enqueue is accepted; a job's status is a clear 501, never a 5xx crash; a dead job is found and replayed", async () => {
    const b = backend({ queues: ["http"] });
    const app = await createServer({ backend: b, apiKeys: false, logger: false });
    open.push(app);
    const accepted = await app.inject({ method: "POST", url: "/v1/queues/http/jobs", payload: { name: "job", data: { n: 1 } } });
    expect(accepted.statusCode, accepted.body).toBe(202);
    const { jobId } = accepted.json<{ jobId: string }>();
    const status = await app.inject({ method: "GET", url: `/v1/jobs/${jobId}?queue=http` });
    expect(status.statusCode).toBe(501);
    expect(status.json()).toMatchObject({ type: "urn:conveyor:problem:not-supported-by-store", capability: "jobRecords" });
    expect(status.json<{ detail: string }>().detail).toMatch(/only dead letters can be looked up/);
    const cancel = await app.inject({ method: "DELETE", url: `/v1/jobs/${jobId}?queue=http` });
    expect(cancel.statusCode).toBe(501);

    const w = worker(b, "http", {
      job: async () => {
        throw new UnrecoverableError("declined");
      },
    });
    await waitFor(async () => (await b.list({ queue: "http", state: "dead" })).length === 1, { timeoutMs: 10_000 });
    await w.close();
    const dead = await app.inject({ method: "GET", url: `/v1/jobs/${jobId}?queue=http` });
    expect(dead.statusCode, dead.body).toBe(200);
    expect(dead.json()).toMatchObject({ state: "dead", error: { message: "declined" } });
    const replay = await app.inject({ method: "POST", url: `/v1/jobs/${jobId}/replay?queue=http` });
    expect(replay.statusCode, replay.body).toBe(200);
    expect(await b.list({ queue: "http", state: "dead" })).toEqual([]);
  });
});
