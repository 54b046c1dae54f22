/**
 * Conveyor in an Express 5 app: the route answers 202 Accepted with a job id at once, a worker
 * (usually its own process) sends the email, and a status route reads the typed result.
 *
 *   npx tsx examples/express/app.ts          # PORT=3000 by default, jobs in .tmp/express.db
 *   curl -si -XPOST localhost:3000/signup -H 'content-type: application/json' -d '{"userId":"u_1"}'
 *   curl -s localhost:3000/jobs/<jobId>
 */
import express, { type NextFunction, type Request, type Response } from "express";
import { pathToFileURL } from "node:url";
import { consoleLogger, defineJob, installShutdownSignals, PayloadValidationError, Queue, Worker, type Backend } from "conveyor-jobs";
import { SqliteBackend } from "conveyor-jobs/sqlite";
import { z } from "zod";

/** The job: its payload schema and the result its handler returns. */
export const sendWelcome = defineJob<{ userId: string }, { sent: boolean }>("send-welcome", z.object({ userId: z.string().min(1) }), {
  attempts: 5,
});

export function createApp(queue: Queue): express.Express {
  const app = express();
  app.use(express.json());

  app.post("/signup", async (req: Request, res: Response) => {
    // Validated by the job's schema; a bad body is answered below with 422 and the field errors.
    const { id } = await queue.add(sendWelcome, req.body as { userId: string }, { jobId: `welcome:${String((req.body as { userId?: unknown })?.userId)}` });
    res
      .status(202)
      .location(`/jobs/${encodeURIComponent(id)}`)
      .json({ jobId: id, statusUrl: `/jobs/${encodeURIComponent(id)}` });
  });

  app.get("/jobs/:id", async (req: Request<{ id: string }>, res: Response) => {
    const job = sendWelcome.narrow(await queue.getJob(req.params.id));
    if (!job) {
      res.status(404).json({ error: `no welcome job ${req.params.id}` });
      return;
    }
    res.json({ state: job.state, attempt: job.attempt, sent: job.result?.sent ?? null });
  });

  // Express 5 passes rejected promises of async handlers here.
  app.use((error: unknown, _req: Request, res: Response, next: NextFunction) => {
    if (error instanceof PayloadValidationError) {
      res.status(422).json({ error: "invalid payload", issues: error.issues });
      return;
    }
    next(error);
  });
  return app;
}

/** The worker side: in production its own process (`conveyor worker`, or this in a worker.ts). */
export function createWorker(backend: Backend): Worker {
  return new Worker({
    backend,
    queues: "email",
    handlers: [
      sendWelcome.handle(async (job, ctx) => {
        await new Promise((resolve) => setTimeout(resolve, 50, undefined)); // the mail provider
        if (ctx.signal.aborted) throw ctx.signal.reason;
        return { sent: job.data.userId.length > 0 };
      }),
    ],
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const backend = new SqliteBackend({ path: process.env.DB ?? ".tmp/express.db" });
  const queue = new Queue("email", { backend });
  const worker = createWorker(backend);
  const server = createApp(queue).listen(Number(process.env.PORT ?? 3000), "127.0.0.1", () => {
    console.log(`listening on http://127.0.0.1:${(server.address() as { port: number }).port}`);
  });
  installShutdownSignals([{ close: () => new Promise((resolve) => server.close(() => resolve({ drained: true, releasedJobIds: [] }))) }, worker], {
    logger: consoleLogger(),
    afterClose: async () => {
      await queue.close();
      await backend.close();
    },
  });
}
