/**
 * API a new user expects: payload schemas from any Standard Schema library (zod, valibot, ArkType,
 * or none), typed results, `Queue.close()`, `worker.pause()` / `resume()`.
 */
import { type } from "arktype";
import * as v from "valibot";
import { afterEach, beforeEach, describe, expect, expectTypeOf, it } from "vitest";
import { z } from "zod";
import {
  ConveyorError,
  defineJob,
  InvalidInputError,
  PayloadValidationError,
  Queue,
  silentLogger,
  Worker,
  type Backend,
  type PayloadSchema,
  type WorkerOptions,
} from "../../src/index.js";
import { createServer } from "../../src/http/index.js";
import { createTestBackend } from "../../src/testing/index.js";
import { waitFor } from "../helpers/wait-for.js";

let backend: Backend;
let queue: Queue;
const workers: Worker[] = [];

function worker(options: Partial<WorkerOptions> & Pick<WorkerOptions, "handlers">): Worker {
  const w = new Worker({ backend, queues: "q", logger: silentLogger, pollIntervalMs: 20, ...options });
  workers.push(w);
  return w;
}

beforeEach(() => {
  backend = createTestBackend();
  queue = new Queue("q", { backend });
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.close({ force: true })));
  await backend.close();
});

/** A schema written by hand against the Standard Schema interface: no library at all. */
const handWritten: PayloadSchema<{ to: string }> = {
  "~standard": {
    version: 1,
    vendor: "hand-written",
    validate: (value) =>
      typeof value === "object" && value !== null && typeof (value as { to?: unknown }).to === "string"
        ? { value: { to: (value as { to: string }).to.toLowerCase() } }
        : { issues: [{ message: "must be an email address", path: [{ key: "to" }] }] },
  },
};

// Each library's schema for { to: string (an email), tries: integer >= 1 with default 3 }: the
// payload is checked at add and stored as given; the handler receives the schema's output.
const schemas = {
  zod: z.object({ to: z.email(), tries: z.number().int().min(1).default(3) }),
  valibot: v.object({ to: v.pipe(v.string(), v.email()), tries: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1)), 3) }),
  arktype: type({ to: "string.email", tries: "number.integer >= 1 = 3" }),
};

describe("payload schemas through Standard Schema", () => {
  it.each(Object.entries(schemas))(
    "%s: add stores the payload as given, refuses bad payloads with field paths, and nothing is stored",
    async (_library, schema) => {
      const sendMail = defineJob("send-mail", schema);
      expectTypeOf<ReturnType<typeof sendMail.parse>>().toEqualTypeOf<{ to: string; tries: number }>();
      const { id } = await queue.add(sendMail, { to: "ada@example.com", tries: 2 });
      expect((await backend.get(id))!.data).toEqual({ to: "ada@example.com", tries: 2 });
      // add takes the schema's input type, where the defaulted field is optional; the default is
      // applied by the worker, right before the handler (see "validates again at run time").
      const defaulted = await queue.add(sendMail, { to: "bob@example.com" });
      expect((await backend.get(defaulted.id))!.data).toEqual({ to: "bob@example.com" });

      const refused = await queue.add(sendMail, { to: "not-an-address", tries: 0 }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(PayloadValidationError);
      const paths = (refused as PayloadValidationError).issues.map((i) => i.path.join("."));
      expect(paths).toEqual(expect.arrayContaining(["to", "tries"]));
      expect((await backend.list()).length).toBe(2);
    },
  );

  it.each(Object.entries(schemas))("%s: the worker validates again at run time and a bad stored payload goes dead", async (_library, schema) => {
    const sendMail = defineJob("send-mail", schema);
    const seen: unknown[] = [];
    worker({ handlers: [sendMail.handle((job) => void seen.push(job.data))] });
    const good = await queue.add("send-mail", { to: "ada@example.com" });
    const bad = await queue.add("send-mail", { to: 42 });
    await waitFor(async () => (await backend.get(good.id))?.state === "completed" && (await backend.get(bad.id))?.state === "dead");
    expect(seen).toEqual([{ to: "ada@example.com", tries: 3 }]);
    expect((await backend.get(bad.id))!.error!.name).toBe("PayloadValidationError");
  });

  it("needs no schema library: a hand-written Standard Schema works end to end", async () => {
    const notify = defineJob("notify", handWritten);
    const seen: unknown[] = [];
    worker({ handlers: [notify.handle((job) => void seen.push(job.data))] });
    const { id } = await queue.add(notify, { to: "ADA@EXAMPLE.COM" });
    await waitFor(async () => (await backend.get(id))?.state === "completed");
    expect((await backend.get(id))!.data).toEqual({ to: "ADA@EXAMPLE.COM" });
    expect(seen).toEqual([{ to: "ada@example.com" }]);
    await expect(queue.add(notify, { to: 1 } as unknown as { to: string })).rejects.toMatchObject({
      issues: [{ path: ["to"], message: "must be an email address" }],
    });
  });

  it("the HTTP API answers 422 with JSON pointers from a valibot schema", async () => {
    const app = await createServer({ backend, apiKeys: false, logger: false, jobs: [defineJob("send-mail", schemas.valibot)] });
    try {
      const reply = await app.inject({ method: "POST", url: "/v1/queues/q/jobs", payload: { name: "send-mail", data: { to: "nope" } } });
      expect(reply.statusCode).toBe(422);
      const body = reply.json<{ errors: Array<{ pointer: string }> }>();
      expect(body.errors.map((e) => e.pointer)).toEqual(["/data/to"]);
      const ok = await app.inject({ method: "POST", url: "/v1/queues/q/jobs", payload: { name: "send-mail", data: { to: "ada@example.com" } } });
      expect(ok.statusCode).toBe(202);
      expect((await backend.get(ok.json<{ jobId: string }>().jobId))!.data).toEqual({ to: "ada@example.com" });
    } finally {
      await app.close();
    }
  });

  it("a schema that transforms its input (string -> number) runs once: stored as sent, the handler gets the output", async () => {
    const parse = defineJob("parse", z.object({ at: z.string().transform((s) => Date.parse(s)) }));
    expectTypeOf<Parameters<typeof queue.add<{ at: number }, unknown, { at: string }>>[1]>().toEqualTypeOf<{ at: string }>();
    const seen: unknown[] = [];
    worker({ handlers: [parse.handle((job) => void seen.push(job.data.at))] });
    const { id } = await queue.add(parse, { at: "2026-12-01T00:00:00Z" });
    await waitFor(async () => ["completed", "dead"].includes((await backend.get(id))?.state ?? ""));
    expect((await backend.get(id))!.state).toBe("completed");
    expect((await backend.get(id))!.data).toEqual({ at: "2026-12-01T00:00:00Z" });
    expect(seen).toEqual([Date.parse("2026-12-01T00:00:00Z")]);
  });

  it("refuses what is not a Standard Schema, and an asynchronous schema, with errors that say what to do", async () => {
    const legacy = { safeParse: (data: unknown) => ({ success: true as const, data }) };
    expect(() => defineJob("old", legacy as unknown as PayloadSchema<unknown>)).toThrow(/Standard Schema v1/);
    const slow = defineJob(
      "slow",
      z.object({ n: z.number() }).refine(async () => true),
    );
    const error = await queue.add(slow, { n: 1 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidInputError);
    expect((error as Error).message).toMatch(/validates asynchronously.*handler/);
    expect(await backend.list()).toEqual([]);
  });
});

describe("typed results", () => {
  it("defineJob<Data, Result> types the handler's return value and the stored result", async () => {
    const welcome = defineJob<{ userId: string }, { sent: boolean; at: string }>("welcome", z.object({ userId: z.string() }));
    // @ts-expect-error the handler must return the declared result type
    welcome.handle(() => ({ sent: "yes" }));
    worker({ handlers: [welcome.handle(async (job) => ({ sent: job.data.userId === "u_1", at: "2026-01-01" }))] });
    const { id } = await queue.add(welcome, { userId: "u_1" });
    await waitFor(async () => (await backend.get(id))?.state === "completed");
    const job = welcome.narrow(await queue.getJob(id));
    expectTypeOf(job!.result).toEqualTypeOf<{ sent: boolean; at: string } | null>();
    expectTypeOf(job!.data).toEqualTypeOf<{ userId: string }>();
    expect(job!.result).toEqual({ sent: true, at: "2026-01-01" });
    // Another job name is not narrowed to this type.
    const other = await queue.add("other", {});
    expect(welcome.narrow(await queue.getJob(other.id))).toBeNull();
    expect(welcome.narrow(null)).toBeNull();
  });
});

describe("Queue.close()", () => {
  it("waits for adds already sent, then refuses new ones", async () => {
    // A store that holds its answer to enqueue until told: close() must wait for it.
    let answer!: () => void;
    const held = new Promise<void>((r) => (answer = r));
    const slow = new Proxy(backend, {
      get(target, key, receiver) {
        if (key === "enqueue")
          return async (...args: Parameters<Backend["enqueue"]>) => {
            const result = await target.enqueue(...args);
            await held;
            return result;
          };
        const value: unknown = Reflect.get(target, key, receiver);
        return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const slowQueue = new Queue("q", { backend: slow });
    const adds = Array.from({ length: 20 }, (_, i) => slowQueue.add("n", { i }));
    let closed = false;
    const closing = slowQueue.close().then(() => (closed = true));
    await new Promise((r) => setTimeout(r, 50));
    expect(closed).toBe(false);
    answer();
    await closing;
    expect((await Promise.all(adds)).length).toBe(20);
    const late = await slowQueue.add("n", {}).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(ConveyorError);
    expect((late as Error).message).toMatch(/closed/);
    expect((await backend.list({}, { limit: 100 })).length).toBe(20);
  });

  it("closes on await using", async () => {
    let captured: Queue | null = null;
    {
      await using scoped = new Queue("q", { backend });
      captured = scoped;
      await scoped.add("n", {});
    }
    await expect(captured.add("n", {})).rejects.toThrow(/closed/);
  });
});

describe("worker.pause() / resume()", () => {
  it("resume() on a worker not yet run() does not start claiming (no heartbeats, no subscription yet)", async () => {
    let claims = 0;
    const claim = backend.claim.bind(backend);
    backend.claim = (request) => {
      claims++;
      return claim(request);
    };
    const { id } = await queue.add("n", {});
    const w = worker({ autostart: false, handlers: { n: async () => undefined } });
    await w.pause();
    w.resume();
    // A fill is scheduled with setImmediate and calls claim() at once: two turns show it.
    for (let turn = 0; turn < 2; turn++) await new Promise((r) => setImmediate(r));
    expect(claims).toBe(0);
    expect((await backend.get(id))!.state).toBe("waiting");
    w.run();
    await waitFor(async () => (await backend.get(id))?.state === "completed");
  });

  it("pause lets the running job finish, hands prefetched jobs back, claims nothing until resume", async () => {
    let releaseFirst!: () => void;
    const firstMayFinish = new Promise<void>((r) => (releaseFirst = r));
    const ran: number[] = [];
    const w = worker({
      concurrency: 1,
      prefetch: 3,
      handlers: {
        n: async (job) => {
          ran.push((job.data as { i: number }).i);
          if ((job.data as { i: number }).i === 0) await firstMayFinish;
        },
      },
    });
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await queue.add("n", { i }, { priority: i })).id);
    await waitFor(() => ran.length === 1 && w.bufferedCount === 3, { description: "job 0 running, three claimed ahead" });

    let pauseSettled = false;
    const paused = w.pause().then(() => (pauseSettled = true));
    // The prefetched jobs go back unstarted (no attempt used) while job 0 is still running.
    await waitFor(async () => (await Promise.all(ids.slice(1).map((id) => backend.get(id)))).every((j) => j!.state === "waiting" && j!.attempt === 0));
    expect(w.bufferedCount).toBe(0);
    expect(pauseSettled).toBe(false);
    expect(w.isPaused).toBe(true);
    releaseFirst();
    await paused;
    expect((await backend.get(ids[0]!))!.state).toBe("completed");

    // Paused: a new job stays waiting through many poll periods (20 ms each) and wake-ups.
    const late = await queue.add("n", { i: 9 });
    await new Promise((r) => setTimeout(r, 300));
    for (const id of [...ids.slice(1), late.id]) expect((await backend.get(id))!.state, id).toBe("waiting");
    expect(w.bufferedCount).toBe(0);
    expect(ran).toEqual([0]);

    w.resume();
    expect(w.isPaused).toBe(false);
    await waitFor(async () => (await backend.get(late.id))?.state === "completed");
    expect(ran.sort()).toEqual([0, 1, 2, 3, 9]);
  });
});
