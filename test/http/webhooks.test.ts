/**
 * Webhooks: Standard Webhooks signatures (the spec's test vector, rotation, tolerance), delivery
 * to a real receiver with retries and dead letters, the sweeper, and the SSRF guard.
 */
import { createServer as createHttpServer, type IncomingHttpHeaders, type Server } from "node:http";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { silentLogger, Worker, type Handler } from "../../src/index.js";
import {
  deniedReason,
  DELIVERY_JOB_NAME,
  generateWebhookSecret,
  signWebhook,
  SsrfGuard,
  verifyWebhook,
  WebhookDispatcher,
  WebhookVerificationError,
  type WebhookOptions,
} from "../../src/http/index.js";
import { guardedPost } from "../../src/http/ssrf.js";
import { TempDirs } from "../helpers/temp.js";
import { waitFor } from "../helpers/wait-for.js";
import { startServer, type Harness, type Obj } from "./harness.js";

const temp = new TempDirs();
let h: Harness | null = null;
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await h?.close();
  h = null;
});
afterAll(() => temp.removeAll());

describe("signing and verifyWebhook", () => {
  const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
  const body = '{"test": 2432232314}';

  it("matches the Standard Webhooks test vector", () => {
    expect(signWebhook(secret, { id, timestamp: 1614265330, body })).toBe("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
  });

  const headersAt = (ts: number, secrets: string | string[] = secret) => ({
    "webhook-id": id,
    "webhook-timestamp": String(ts),
    "webhook-signature": signWebhook(secrets, { id, timestamp: ts, body }),
  });
  // Every check below passes `now`, so a slow machine cannot move the tolerance window.
  const now = Math.floor(Date.now() / 1000);
  const at = { now: now * 1000 };

  it("verifies and returns the parsed body; accepts Headers, Buffer bodies and the unprefixed secret", () => {
    expect(verifyWebhook(secret, headersAt(now), body, at)).toEqual({ test: 2432232314 });
    expect(verifyWebhook([secret], new Headers(headersAt(now)), Buffer.from(body), at)).toEqual({ test: 2432232314 });
    expect(verifyWebhook(secret.slice("whsec_".length), headersAt(now), body, at)).toEqual({ test: 2432232314 });
  });

  it("rotation: a message signed with the new and the old secret verifies with either", () => {
    const fresh = generateWebhookSecret();
    const headers = headersAt(now, [fresh, secret]);
    expect(headers["webhook-signature"].split(" ")).toHaveLength(2);
    expect(verifyWebhook(secret, headers, body, at)).toBeTruthy();
    expect(verifyWebhook(fresh, headers, body, at)).toBeTruthy();
    expect(verifyWebhook([generateWebhookSecret(), fresh], headers, body, at)).toBeTruthy();
  });

  it("refuses a wrong secret, a changed body, missing headers and timestamps outside the tolerance", () => {
    const wrong = () => verifyWebhook(generateWebhookSecret(), headersAt(now), body, at);
    expect(wrong).toThrow(WebhookVerificationError);
    expect(() => verifyWebhook(secret, headersAt(now), body.replace("2432", "2433"), at)).toThrow(/no signature matches/);
    expect(() => verifyWebhook(secret, { "webhook-id": id }, body, at)).toThrow(/missing/);
    expect(() => verifyWebhook(secret, headersAt(now - 301), body, at)).toThrow(/old/);
    expect(() => verifyWebhook(secret, headersAt(now + 301), body, at)).toThrow(/future/);
    expect(verifyWebhook(secret, headersAt(now - 300), body, at)).toBeTruthy();
    expect(verifyWebhook(secret, headersAt(now - 3_000), body, { ...at, toleranceSeconds: 3_600 })).toBeTruthy();
    const v2only = { ...headersAt(now), "webhook-signature": headersAt(now)["webhook-signature"].replace("v1,", "v2,") };
    expect(() => verifyWebhook(secret, v2only, body, at)).toThrow(/no signature/);
    expect(() => signWebhook("whsec_", { id, timestamp: now, body })).toThrow(/base64/);
  });
});

describe("SSRF guard", () => {
  it.each([
    ["127.0.0.1", "loopback"],
    ["127.255.0.9", "loopback"],
    ["10.1.2.3", "private"],
    ["172.16.5.4", "private"],
    ["172.31.255.255", "private"],
    ["192.168.1.1", "private"],
    ["169.254.169.254", "link-local"],
    ["100.64.0.1", "carrier-grade NAT"],
    ["100.127.255.255", "carrier-grade NAT"],
    ["0.0.0.0", "unspecified"],
    ["::", "unspecified"],
    ["::1", "loopback"],
    ["fe80::1", "link-local"],
    ["fc00::1", "unique-local"],
    ["fd12:3456::1", "unique-local"],
    ["::ffff:127.0.0.1", "IPv4-mapped"],
    ["::ffff:8.8.8.8", "IPv4-mapped"],
    ["64:ff9b::a00:1", "NAT64"],
    ["224.0.0.1", "multicast"],
  ])("refuses %s (%s)", (address, label) => {
    expect(deniedReason(address)).toContain(label);
  });

  it.each(["8.8.8.8", "172.32.0.1", "100.128.0.1", "1.1.1.1", "2606:4700:4700::1111"])("allows public %s", (address) => {
    expect(deniedReason(address)).toBeNull();
  });

  it("checks URLs: scheme, credentials, literal addresses, localhost, https-only for public hosts", () => {
    const guard = new SsrfGuard();
    expect(guard.checkUrl("https://hooks.example.com/x").host).toBe("hooks.example.com");
    expect(() => guard.checkUrl("http://hooks.example.com/x")).toThrow(/https/);
    expect(() => guard.checkUrl("ftp://hooks.example.com/x")).toThrow(/https/);
    expect(() => guard.checkUrl("https://user:pw@hooks.example.com/")).toThrow(/credentials/);
    expect(() => guard.checkUrl("https://10.0.0.7/")).toThrow(/private/);
    expect(() => guard.checkUrl("https://[::ffff:7f00:1]/")).toThrow(/IPv4-mapped/);
    expect(() => guard.checkUrl("https://localhost:8080/")).toThrow(/loopback/);
    expect(() => guard.checkUrl("not a url")).toThrow(/absolute URL/);
    expect(new SsrfGuard({ allowHttp: true }).checkUrl("http://hooks.example.com/").protocol).toBe("http:");
  });

  it("allow-lists hosts, addresses and CIDR ranges (which may then use http)", () => {
    const guard = new SsrfGuard({ allow: ["127.0.0.1", "10.20.0.0/16", "hooks.internal", "::1"] });
    expect(guard.checkUrl("http://127.0.0.1:9000/").port).toBe("9000");
    expect(guard.checkUrl("http://10.20.3.4/").hostname).toBe("10.20.3.4");
    expect(() => guard.checkUrl("http://10.21.3.4/")).toThrow(/private/);
    expect(guard.checkUrl("http://hooks.internal/").hostname).toBe("hooks.internal");
    expect(guard.checkUrl("http://[::1]:9000/").port).toBe("9000");
    expect(() => new SsrfGuard({ allow: ["not a host!"] })).toThrow(/allow-list/);
  });

  it("resolves host names and refuses them when an address is internal", async () => {
    await expect(new SsrfGuard().resolve(new URL("http://localhost/"))).rejects.toThrow(/loopback/);
    await expect(new SsrfGuard({ allow: ["127.0.0.1", "::1"] }).resolve(new URL("http://localhost/"))).resolves.toMatchObject({
      address: expect.stringMatching(/^(127\.0\.0\.1|::1)$/) as string,
    });
  });

  it("connects to the address it checked, not to a fresh DNS answer (pinning), and never follows redirects", async () => {
    const receiver = await startReceiver(() => ({ status: 302, headers: { location: "http://127.0.0.1:1/elsewhere" } }));
    // "pinned.invalid" resolves nowhere: the request can only reach the receiver through the pin.
    class PinnedGuard extends SsrfGuard {
      override async resolve(): Promise<{ address: string; family: 4 | 6 }> {
        return { address: "127.0.0.1", family: 4 };
      }
    }
    const guard = new PinnedGuard({ allow: ["pinned.invalid"] });
    const result = await guardedPost(guard, `http://pinned.invalid:${receiver.port}/hook`, "{}", {}, { timeoutMs: 5_000 });
    expect(result.status).toBe(302);
    expect(receiver.requests).toHaveLength(1);
    expect(receiver.requests[0]!.headers.host).toBe(`pinned.invalid:${receiver.port}`);
  });
});

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  url: string;
}

async function startReceiver(
  answer: (n: number) => { status: number; headers?: Record<string, string> },
): Promise<{ url: string; port: number; requests: Received[] }> {
  const requests: Received[] = [];
  const server: Server = createHttpServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      requests.push({ headers: req.headers, body, url: req.url ?? "" });
      const a = answer(requests.length);
      res.writeHead(a.status, a.headers ?? {});
      res.end(a.status >= 300 ? "nope" : "ok");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => new Promise((r) => server.close(r)));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}/hook`, port, requests };
}

const SECRET = generateWebhookSecret();

async function setup(
  extra: Partial<WebhookOptions> = {},
  handlers: Record<string, Handler> = { work: async (job) => ({ doubled: (job.data as { n: number }).n * 2 }) },
) {
  let webhooks!: WebhookDispatcher;
  h = await startServer(
    temp,
    {},
    {
      configure: (backend) => {
        webhooks = new WebhookDispatcher({
          backend,
          secrets: [SECRET],
          allow: ["127.0.0.1"],
          backoff: { type: "fixed", delayMs: 10 },
          sweepIntervalMs: 0,
          logger: silentLogger,
          ...extra,
        });
        return { webhooks };
      },
    },
  );
  webhooks.start({ pollIntervalMs: 20, logger: silentLogger, maintenance: false });
  const worker = new Worker({ backend: h.backend, queues: "jobs", handlers, pollIntervalMs: 20, logger: silentLogger });
  cleanups.push(
    () => webhooks.close({ force: true }),
    () => worker.close({ force: true }),
  );
  return { webhooks, worker };
}

async function enqueue(body: Obj): Promise<{ status: number; json: Obj }> {
  return h!.request("POST", "/v1/queues/jobs/jobs", { body });
}

describe("webhook deliveries", () => {
  it("a job's callbackUrl receives a signed job.completed event from the process that completed it", async () => {
    const receiver = await startReceiver(() => ({ status: 204 }));
    const { webhooks, worker } = await setup();
    webhooks.attach(worker);
    const r = await enqueue({ name: "work", data: { n: 21 }, options: { callbackUrl: receiver.url } });
    expect(r.status).toBe(202);
    await waitFor(() => receiver.requests.length === 1, { timeoutMs: 10_000, description: "the delivery" });
    const [req] = receiver.requests;
    const event = verifyWebhook(SECRET, req!.headers, req!.body) as { type: string; data: Obj };
    expect(req!.headers["content-type"]).toBe("application/json");
    expect(event.type).toBe("job.completed");
    expect(event.data).toMatchObject({ id: r.json.jobId, state: "completed", result: { doubled: 42 }, queue: "jobs", name: "work" });
    expect(req!.headers["webhook-id"]).toMatch(/^whk_/);
    // The delivery itself is a job: visible, completed, with the receiver's status as result.
    const delivery = await waitFor(async () => {
      const d = await h!.backend.get(req!.headers["webhook-id"] as string);
      return d?.state === "completed" ? d : null;
    });
    expect(delivery).toMatchObject({ queue: "conveyor.webhooks", name: DELIVERY_JOB_NAME, result: { status: 204, attempt: 1 } });
  });

  it("retries a failing receiver with backoff under one webhook-id, fresh timestamps and valid signatures", async () => {
    const receiver = await startReceiver((n) => ({ status: n < 3 ? 500 : 200 }));
    const { webhooks, worker } = await setup();
    webhooks.attach(worker);
    await enqueue({ name: "work", data: { n: 1 }, options: { callbackUrl: receiver.url } });
    await waitFor(() => receiver.requests.length === 3, { timeoutMs: 15_000, description: "three delivery attempts" });
    const ids = new Set(receiver.requests.map((r) => r.headers["webhook-id"]));
    expect(ids.size).toBe(1);
    for (const req of receiver.requests) expect(verifyWebhook(SECRET, req.headers, req.body)).toBeTruthy();
    const delivery = await waitFor(async () => {
      const d = await h!.backend.get([...ids][0] as string);
      return d?.state === "completed" ? d : null;
    });
    expect(delivery.history.map((a) => a.outcome)).toEqual(["failed", "failed", "completed"]);
    expect(delivery.history[0]!.error?.message).toContain("answered 500");
  });

  it("dead-letters a delivery that keeps failing: visible in the dead-letter list, replayable", async () => {
    const receiver = await startReceiver(() => ({ status: 503 }));
    const { webhooks, worker } = await setup({ attempts: 2 });
    webhooks.attach(worker);
    await enqueue({ name: "work", data: { n: 1 }, options: { callbackUrl: receiver.url } });
    const dead = await waitFor(
      async () => {
        const r = await h!.request<{ jobs: Obj[] }>("GET", "/v1/queues/conveyor.webhooks/dead");
        return r.json.jobs.length === 1 ? r.json.jobs[0] : null;
      },
      { timeoutMs: 15_000 },
    );
    expect(dead).toMatchObject({ name: DELIVERY_JOB_NAME, attempts: { made: 2, max: 2 }, failure: { name: "WebhookDeliveryError" } });
    expect(receiver.requests).toHaveLength(2);
    expect((await h!.request("POST", `/v1/jobs/${encodeURIComponent(dead.id as string)}/replay`)).status).toBe(200);
    await waitFor(() => receiver.requests.length === 3, { timeoutMs: 10_000 });
  });

  it("a 410 Gone stops at once; a redirect is a failure, not followed", async () => {
    const gone = await startReceiver(() => ({ status: 410 }));
    const target = await startReceiver(() => ({ status: 200 }));
    const moved = await startReceiver(() => ({ status: 301, headers: { location: target.url } }));
    const { webhooks, worker } = await setup({ attempts: 3 });
    webhooks.attach(worker);
    await enqueue({ name: "work", data: { n: 1 }, options: { callbackUrl: gone.url } });
    await enqueue({ name: "work", data: { n: 2 }, options: { callbackUrl: moved.url } });
    await waitFor(async () => (await h!.backend.stats("conveyor.webhooks"))[0]!.counts.dead === 2, { timeoutMs: 15_000 });
    expect(gone.requests).toHaveLength(1);
    expect(moved.requests).toHaveLength(3);
    expect(target.requests).toHaveLength(0);
    const dead = await h!.backend.list({ queue: "conveyor.webhooks", state: "dead" });
    expect(dead.map((d) => d.error?.message).join("\n")).toMatch(/redirects are not followed/);
  });

  it("subscriptions per queue and job name; the sweeper covers jobs finished by workers without webhooks", async () => {
    const all = await startReceiver(() => ({ status: 200 }));
    const onlyDead = await startReceiver(() => ({ status: 200 }));
    const subSecret = generateWebhookSecret();
    const { webhooks } = await setup(
      {
        sweepIntervalMs: 50,
        subscriptions: [
          { id: "everything", url: all.url, queues: "jobs" },
          { id: "failures", url: onlyDead.url, names: ["fragile"], events: ["job.dead"], secrets: [subSecret] },
        ],
      },
      {
        work: async () => "ok",
        fragile: async () => {
          throw new Error("always");
        },
      },
    );
    // No attach(): only the sweeper can find these.
    await enqueue({ name: "work" });
    await enqueue({ name: "fragile", options: { attempts: 1 } });
    await waitFor(() => all.requests.length === 2 && onlyDead.requests.length === 1, { timeoutMs: 15_000, description: "sweeper deliveries" });
    const types = all.requests.map((r) => (verifyWebhook(SECRET, r.headers, r.body) as { type: string }).type).sort();
    expect(types).toEqual(["job.completed", "job.dead"]);
    const failure = verifyWebhook(subSecret, onlyDead.requests[0]!.headers, onlyDead.requests[0]!.body) as { type: string; data: Obj };
    expect(failure).toMatchObject({ type: "job.dead", data: { name: "fragile", error: { message: "always" } } });
    // Later sweeps find the same jobs again and add nothing (deterministic delivery ids).
    const deliveryIds = async () => (await h!.backend.list({ queue: "conveyor.webhooks" })).map((j) => j.id).sort();
    const before = await deliveryIds();
    expect(before).toHaveLength(3);
    // Two more sweeps, run here rather than hoped for within a sleep, find nothing new.
    expect(await webhooks.sweep()).toBe(0);
    expect(await webhooks.sweep()).toBe(0);
    expect(await deliveryIds()).toEqual(before);
    expect(all.requests).toHaveLength(2);
  });

  it("refuses internal callback URLs at enqueue (422), and re-checks them at delivery", async () => {
    const { webhooks } = await setup({ allow: [] });
    for (const url of [
      "http://10.0.0.1/hook",
      "https://169.254.169.254/latest/meta-data",
      "https://localhost/x",
      "https://[::1]/",
      "http://hooks.example.com/",
    ]) {
      const r = await enqueue({ name: "work", options: { callbackUrl: url } });
      expect(r.status, url).toBe(422);
      expect((r.json.errors as Obj[])[0]).toMatchObject({ pointer: "/options/callbackUrl" });
    }
    expect((await h!.backend.stats("jobs"))[0]?.counts.waiting ?? 0).toBe(0);

    // A delivery job that names an internal target (written straight to the store) dies unsent.
    const spy = await startReceiver(() => ({ status: 200 }));
    await h!.backend.enqueue([
      {
        id: "whk_forged",
        queue: webhooks.queue,
        name: DELIVERY_JOB_NAME,
        payload: JSON.stringify({ target: "callback", url: spy.url, event: { type: "job.completed", timestamp: new Date().toISOString(), data: {} } }),
        priority: 0,
        runAt: null,
        delayMs: 0,
        maxAttempts: 5,
        backoff: { type: "fixed", delayMs: 10 },
        timeoutMs: null,
        retainCompletedMs: null,
        retainDeadMs: null,
        meta: null,
      },
    ]);
    const dead = await waitFor(
      async () => {
        const d = await h!.backend.get("whk_forged");
        return d?.state === "dead" ? d : null;
      },
      { timeoutMs: 10_000 },
    );
    expect(dead.attempt).toBe(1);
    expect(dead.error?.message).toMatch(/loopback.*allow-list/);
    expect(spy.requests).toHaveLength(0);
  });
});
