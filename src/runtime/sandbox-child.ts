/**
 * The process a sandboxed handler runs in. Loads the handlers module (argv[2]), then runs one job
 * at a time for its parent Worker. Whatever the handler does — block the event loop, call
 * process.exit, leak memory — only this process suffers; the parent kills and replaces it.
 */
import { pathToFileURL } from "node:url";
import { Worker as Thread } from "node:worker_threads";
import { validatePayload, type BoundHandler, type Handler, type Job, type JobContext } from "../core/define.js";
import { errorInfo } from "../core/error-info.js";
import { RetryLater, UnrecoverableError } from "../core/errors.js";
import type { ErrorInfo } from "../core/job.js";
import type { Json } from "../core/json.js";
import type { FromSandbox, ToSandbox } from "./sandbox-protocol.js";

const send = (message: FromSandbox) => process.send!(message);

/** The error as the parent will keep it, cut here already (an IPC message has to fit in one string). */
function info(error: unknown): ErrorInfo {
  return errorInfo(error instanceof Error ? error : new Error(String(error)));
}

async function load(path: string): Promise<Map<string, BoundHandler<unknown>>> {
  const mod = (await import(path.startsWith("file:") ? path : pathToFileURL(path).href)) as { default?: unknown };
  const exported = mod.default;
  if (!exported || typeof exported !== "object") throw new Error(`sandbox module ${path} must default-export its handlers`);
  const list: BoundHandler<unknown>[] = Array.isArray(exported)
    ? (exported as BoundHandler<unknown>[])
    : Object.entries(exported as Record<string, Handler | BoundHandler<unknown>>).map(([name, h]) =>
        typeof h === "function" ? { name, schema: null, run: h } : { ...h, name },
      );
  return new Map(list.map((h) => [h.name, h]));
}

let current: AbortController | null = null;
let nextRequest = 1;
const pending = new Map<number, { resolve: (v: boolean) => void; reject: (e: Error) => void }>();

async function run(handlers: Map<string, BoundHandler<unknown>>, job: Job<unknown>): Promise<void> {
  const controller = new AbortController();
  current = controller;
  const ctx: JobContext = {
    signal: controller.signal,
    progress: async (value: Json) => {
      send({ type: "progress", value });
    },
    // Stored by the parent's ctx.log, in message order, before the "done" that follows it.
    log: async (line: string) => {
      send({ type: "log", line: String(line) });
    },
    once: (key, ttlMs = 86_400_000) =>
      new Promise<boolean>((resolve, reject) => {
        const requestId = nextRequest++;
        pending.set(requestId, { resolve, reject });
        send({ type: "once", requestId, key, ttlMs });
      }),
    tx: () => Promise.reject(new Error("ctx.tx() is not available inside a sandbox")),
    children: () => Promise.reject(new Error("ctx.children() is not available inside a sandbox; run flow parents outside it")),
  };
  try {
    const handler = handlers.get(job.name);
    if (!handler) throw new UnrecoverableError(`the sandbox module has no handler for job "${job.name}"`);
    if (handler.schema) job.data = validatePayload(job.name, handler.schema, job.data);
    const value = await handler.run(job, ctx);
    send({ type: "done", result: value === undefined ? null : (JSON.parse(JSON.stringify(value)) as Json) });
  } catch (error) {
    send({
      type: "failed",
      error: info(error),
      unrecoverable: error instanceof UnrecoverableError,
      retryDelayMs: error instanceof RetryLater ? error.delayMs : null,
    });
  } finally {
    current = null;
  }
}

const handlersReady = load(process.argv[2]!).then(
  (handlers) => {
    send({ type: "ready", names: [...handlers.keys()] });
    return handlers;
  },
  (error: unknown) => {
    send({ type: "load-error", error: info(error) });
    process.exitCode = 1;
    return null;
  },
);

process.on("message", (message: ToSandbox) => {
  switch (message.type) {
    case "run":
      void handlersReady.then((handlers) => handlers && run(handlers, message.job as Job<unknown>));
      break;
    case "abort": {
      const reason = Object.assign(new Error(message.reason.message), { name: message.reason.name });
      current?.abort(reason);
      break;
    }
    case "once-result":
      pending.get(message.requestId)?.resolve(message.value);
      pending.delete(message.requestId);
      break;
    case "call-error":
      pending.get(message.requestId)?.reject(new Error(message.message));
      pending.delete(message.requestId);
      break;
  }
});
// The parent went away: nothing here may outlive it.
process.on("disconnect", () => process.exit(0));

// …but a handler blocking the event loop keeps "disconnect" from ever running, and a parent that
// was SIGKILLed cannot kill us at the job's timeout any more: the process would spin on, orphaned,
// for good. A thread keeps running while the loop is blocked; when this process has been handed to
// another parent (ours died), it kills the process.
const orphanWatch = new Thread(
  `const { workerData } = require("node:worker_threads");
   setInterval(() => { if (process.ppid !== workerData.parent) process.kill(process.pid, "SIGKILL"); }, 500);`,
  { eval: true, workerData: { parent: process.ppid } },
);
orphanWatch.unref();
