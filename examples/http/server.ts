/**
 * The Conveyor HTTP API mounted inside your own Fastify app, next to your routes.
 *
 *   npx tsx examples/http/server.ts        then, in another terminal, the curl lines it prints
 *
 * What it shows:
 * - `conveyorHttp` registered under your app's prefix, with API keys (only their SHA-256 is
 *   configured), a job registry (payloads validated against zod schemas: 422 with field errors),
 *   and signed webhooks for `callbackUrl`;
 * - your own route answering "202 Accepted" by enqueueing through the same backend;
 * - a worker in the same process (for the demo; in production it is usually its own process).
 */
import Fastify from "fastify";
import { z } from "zod";
import { defineJob, Queue, Worker } from "conveyor-jobs";
import { conveyorHttp, generateApiKey, generateWebhookSecret, hashApiKey, WebhookDispatcher } from "conveyor-jobs/http";
import { SqliteBackend } from "conveyor-jobs/sqlite";

const backend = new SqliteBackend({ path: process.env.DB ?? ".tmp/example-http.db" });

// Job types: the schema validates payloads at the API (422) and again in the worker.
const renderInvoice = defineJob("render-invoice", z.object({ orderId: z.string().min(1), locale: z.enum(["en", "fr"]).default("en") }), {
  attempts: 5,
  backoff: { type: "exponential", delayMs: 1_000, maxDelayMs: 30_000 },
});

// Keys: generate once, give the key to the client, keep only the hash in configuration.
const webKey = process.env.WEB_KEY ?? generateApiKey();
const adminKey = process.env.ADMIN_KEY ?? generateApiKey();

// Webhooks: the signing secret lives in your secret store; receivers verify with verifyWebhook().
const webhooks = new WebhookDispatcher({
  backend,
  secrets: [process.env.WEBHOOK_SECRET ?? generateWebhookSecret()],
  allow: ["127.0.0.1"], // internal receivers you trust; everything private is refused otherwise
});

const app = Fastify({ logger: { level: "info" } });

// Your own route: answers 202 at once, the work happens in a worker.
const invoices = new Queue("documents", { backend });
app.post<{ Params: { orderId: string } }>("/orders/:orderId/invoice", async (request, reply) => {
  const { id } = await invoices.add(renderInvoice, { orderId: request.params.orderId, locale: "en" }, { jobId: `invoice:${request.params.orderId}` });
  return reply
    .code(202)
    .header("location", `/jobs-api/v1/jobs/${encodeURIComponent(id)}`)
    .send({ jobId: id });
});

await app.register(conveyorHttp, {
  prefix: "/jobs-api",
  backend,
  apiKeys: [
    { id: "web", sha256: hashApiKey(webKey), scopes: ["enqueue", "read"] },
    { id: "ops", sha256: hashApiKey(adminKey), scopes: ["admin"] },
  ],
  jobs: [renderInvoice],
  webhooks,
  cors: { origins: ["http://localhost:5173"] },
});

const worker = new Worker({
  backend,
  queues: "documents",
  handlers: [
    renderInvoice.handle(async (job, ctx) => {
      for (let page = 1; page <= 4; page++) {
        await new Promise((r) => setTimeout(r, 250));
        ctx.signal.throwIfAborted();
        await ctx.progress({ page, of: 4 });
      }
      return { url: `https://files.example.com/invoices/${job.data.orderId}.pdf` };
    }),
  ],
});
webhooks.attach(worker);
webhooks.start({ maintenance: false });

app.addHook("onClose", async () => {
  await worker.close();
  await webhooks.close();
  await backend.close();
});
for (const signal of ["SIGINT", "SIGTERM"] as const) process.once(signal, () => void app.close());

await app.listen({ port: Number(process.env.PORT ?? 3000), host: "127.0.0.1" });
console.log(`
  curl -s -XPOST localhost:3000/jobs-api/v1/queues/documents/jobs \\
       -H 'authorization: Bearer ${webKey}' -H 'content-type: application/json' \\
       -H 'idempotency-key: order-42' -d '{"name":"render-invoice","data":{"orderId":"42"}}'
  curl -s localhost:3000/jobs-api/v1/jobs/<jobId> -H 'authorization: Bearer ${webKey}'
  curl -N localhost:3000/jobs-api/v1/jobs/<jobId>/events -H 'authorization: Bearer ${webKey}'
  curl -s localhost:3000/jobs-api/v1/queues -H 'authorization: Bearer ${adminKey}'
  curl -s localhost:3000/jobs-api/v1/openapi.json
`);
